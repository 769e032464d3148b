"""Generate a tiny random-weight Llama and a byte-level BPE tokenizer in a folder.

Runs on the host (no hub downloads exist there). Idempotent: an existing complete model is
kept. Prints one JSON document: the folder and the model's dimensions.

usage: make_tiny_model.py OUT_DIR
"""

import json
import os
import sys


def main() -> None:
    out_dir = os.path.abspath(sys.argv[1])
    marker = os.path.join(out_dir, ".complete")
    if not os.path.exists(marker):
        import torch
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
        from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

        torch.manual_seed(0)
        config = LlamaConfig(
            hidden_size=256,
            intermediate_size=512,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=512,
            max_position_embeddings=2048,
            torch_dtype="bfloat16",
            tie_word_embeddings=False,
        )
        model = LlamaForCausalLM(config).to(torch.bfloat16)
        tmp_dir = out_dir + ".tmp"
        model.save_pretrained(tmp_dir, safe_serialization=True)

        tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        corpus = [
            "The quick brown fox jumps over the lazy dog.",
            "Profiling a large language model shows where decode time goes.",
            "All-reduce, GEMM and attention kernels share the step.",
            "0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ",
        ] * 20
        trainer = trainers.BpeTrainer(
            vocab_size=config.vocab_size,
            special_tokens=["<unk>", "<s>", "</s>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
        tokenizer.train_from_iterator(corpus, trainer)
        wrapped = PreTrainedTokenizerFast(
            tokenizer_object=tokenizer,
            bos_token="<s>",
            eos_token="</s>",
            unk_token="<unk>",
        )
        wrapped.chat_template = "{% for message in messages %}{{ message['content'] }}\n{% endfor %}"
        wrapped.save_pretrained(tmp_dir)
        if os.path.exists(out_dir):
            import shutil

            shutil.rmtree(out_dir)
        os.replace(tmp_dir, out_dir)
        open(marker, "w").close()
    with open(os.path.join(out_dir, "config.json")) as handle:
        config = json.load(handle)
    print(json.dumps({"model_dir": out_dir, "config": config}))


if __name__ == "__main__":
    main()
