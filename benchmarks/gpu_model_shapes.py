"""Model-shaped folders for `vllm serve --load-format dummy`: a config.json beside a tokenizer.

usage: python3 gpu_model_shapes.py TOKENIZER_DIR OUT_DIR SHAPE
SHAPE: llama8b_bf16 (Llama-3.1-8B), llama8b_w4a16 (the same, compressed-tensors pack-quantized
int4 group 128: Machete on Hopper), qwen3moe_bf16 (Qwen3-30B-A3B: 128 experts, top-8),
qwen3moe_w4a16 (the same, compressed-tensors int4 group 128 on every Linear but lm_head and
the router, as published W4A16 Qwen3-MoE checkpoints are: Marlin MoE for the experts),
kimik2_4layer_int4 (DeepSeek-V3 architecture as Kimi-K2, cut to 4 layers: MLA, 384 experts,
int4 group 32 experts, bf16 attention and shared experts). Standard library only.
"""

import json
import os
import shutil
import sys


def int4(group: int, ignore: list[str]) -> dict:
    return {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "quantization_status": "compressed",
        "ignore": ignore,
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "input_activations": None,
                "output_activations": None,
                "weights": {
                    "num_bits": 4,
                    "type": "int",
                    "symmetric": True,
                    "strategy": "group",
                    "group_size": group,
                    "dynamic": False,
                    "actorder": None,
                },
            }
        },
    }


def shape(kind: str, special: dict) -> dict:
    llama = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 128256,
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        **special,
    }
    if kind == "llama8b_bf16":
        return llama
    if kind == "llama8b_w4a16":
        return {**llama, "quantization_config": int4(128, ["lm_head"])}
    if kind == "qwen3moe_bf16":
        return {
            "architectures": ["Qwen3MoeForCausalLM"],
            "model_type": "qwen3_moe",
            "hidden_size": 2048,
            "intermediate_size": 6144,
            "moe_intermediate_size": 768,
            "num_hidden_layers": 48,
            "num_attention_heads": 32,
            "num_key_value_heads": 4,
            "head_dim": 128,
            "num_experts": 128,
            "num_experts_per_tok": 8,
            "norm_topk_prob": True,
            "decoder_sparse_step": 1,
            "mlp_only_layers": [],
            "vocab_size": 151936,
            "max_position_embeddings": 8192,
            "rms_norm_eps": 1e-6,
            "rope_theta": 1000000.0,
            "hidden_act": "silu",
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "attention_bias": False,
            **special,
        }
    if kind == "qwen3moe_w4a16":
        return {**shape("qwen3moe_bf16", special), "quantization_config": int4(128, ["lm_head", "re:.*mlp.gate$"])}
    if kind == "kimik2_4layer_int4":
        return {
            "architectures": ["DeepseekV3ForCausalLM"],
            "model_type": "deepseek_v3",
            "vocab_size": 163840,
            "hidden_size": 7168,
            "intermediate_size": 18432,
            "num_hidden_layers": 4,
            "num_attention_heads": 64,
            "num_key_value_heads": 64,
            "kv_lora_rank": 512,
            "q_lora_rank": 1536,
            "qk_rope_head_dim": 64,
            "qk_nope_head_dim": 128,
            "v_head_dim": 128,
            "moe_intermediate_size": 2048,
            "n_routed_experts": 384,
            "n_shared_experts": 1,
            "num_experts_per_tok": 8,
            "first_k_dense_replace": 1,
            "moe_layer_freq": 1,
            "n_group": 1,
            "topk_group": 1,
            "routed_scaling_factor": 2.827,
            "scoring_func": "sigmoid",
            "topk_method": "noaux_tc",
            "norm_topk_prob": True,
            "rope_theta": 50000.0,
            "max_position_embeddings": 8192,
            "rms_norm_eps": 1e-6,
            "hidden_act": "silu",
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "attention_bias": False,
            "num_nextn_predict_layers": 0,
            **special,
            "quantization_config": int4(
                32, ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"]
            ),
        }
    raise SystemExit(f"unknown shape {kind}")


def main() -> None:
    tokenizer, out, kind = sys.argv[1:4]
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(tokenizer):
        if name.startswith(("tok", "special")) or name in ("generation_config.json", "chat_template.jinja"):
            shutil.copy(os.path.join(tokenizer, name), out)
    base = json.load(open(os.path.join(tokenizer, "config.json")))
    special = {key: base[key] for key in ("bos_token_id", "eos_token_id") if key in base}
    json.dump(shape(kind, special), open(os.path.join(out, "config.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
