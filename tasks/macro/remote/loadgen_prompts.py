"""What the load client sends (standard library, plus `tokenizers` where the host has it):
prompts with a unique prefix each, of random token ids, synthetic text or ShareGPT turns, and the
output tokens each request asks for. Shipped beside loadgen.py, which imports it.
"""

import json
import os
import random

PREFIX_TOKENS = 5


def unique_prefix(uid, low, high):
    """``uid`` as PREFIX_TOKENS token ids in [low, high): distinct uids, distinct prefixes."""
    base = high - low
    digits = []
    for _ in range(PREFIX_TOKENS):
        uid, digit = divmod(uid, base)
        digits.append(low + digit)
    return digits


WORDS = (
    "time year people way day man thing woman life child world school state family student group"
    " country problem hand part place case week company system program question work government"
    " number night point home water room mother area money story fact month lot right study book"
    " eye job word business issue side kind head house service friend father power hour game line"
    " end member law car city community name president team minute idea kid body information back"
).split()


def load_tokenizer(folder):
    """The model's tokenizer (tokenizer.json through the `tokenizers` library vLLM depends on), or
    None: text prompts are then cut by words, and the prompt tokens measured from `usage`."""
    if not folder:
        return None
    try:
        from tokenizers import Tokenizer

        return Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    except Exception:  # noqa: BLE001 - optional: any failure means "cut by words"
        return None


def cut_text(text, tokens, tokenizer):
    """``text`` if it has at most ``tokens`` tokens (words without a tokenizer), else its start."""
    if tokenizer is None:
        words = text.split()
        return text if len(words) <= tokens else " ".join(words[:tokens])
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    return text if len(ids) <= tokens else tokenizer.decode(ids[:tokens])


def sharegpt_prompts(path):
    """(first human turn, its reply) of each conversation with a reply, from a ShareGPT-format
    JSON file."""
    with open(path, encoding="utf-8") as handle:
        entries = json.load(handle)
    pairs = []
    for entry in entries if isinstance(entries, list) else []:
        turns = entry.get("conversations") or entry.get("conversation") or [] if isinstance(entry, dict) else []
        if len(turns) >= 2 and isinstance(turns[0], dict) and str(turns[0].get("value", "")).strip():
            reply = turns[1].get("value", "") if isinstance(turns[1], dict) else ""
            pairs.append((str(turns[0]["value"]), str(reply)))
    if not pairs:
        raise SystemExit(
            f"{path}: no conversation with a first turn and a reply (ShareGPT format:"
            " [{'conversations': [{'from': 'human', 'value': ...}, {'from': 'gpt', ...}]}])"
        )
    return pairs


def count_tokens(text, tokenizer):
    return len(tokenizer.encode(text, add_special_tokens=False).ids) if tokenizer is not None else len(text.split())


def prompt_source(args, rng):
    """A function giving the next request's prompt (token ids for random prompts on
    /v1/completions, else text) and the output tokens it asks for: --output-tokens, except for a
    ShareGPT conversation, which asks for its reply's length (as `vllm bench serve` does) and
    sends its first turn, each cut to --output-tokens / --input-tokens at most (the limits
    `orchestrate check` held against max_model_len; counted with the model's tokenizer, in words
    without one).

    Every prompt starts with a unique id, so no request can hit vLLM's prefix cache on another's
    prompt: within a run by construction (a counter), across runs by a 40-bit random run id
    (random prompts from a small vocabulary otherwise share first tokens often enough to be
    served from the cache and flatter TTFT; dataset prompts repeat across runs)."""
    high = max(20, args.vocab - 10)
    run_id = random.SystemRandom().getrandbits(40) << 20
    count = [0]
    tokenizer = load_tokenizer(args.tokenizer) if args.dataset != "random" or args.endpoint == "chat" else None
    dataset = sharegpt_prompts(args.dataset_path) if args.dataset == "sharegpt" else None

    shared_count = getattr(args, "shared_prefix", 0) or 0
    # A system prompt every request shares: the same tokens in every run (a fixed seed), so the
    # prefix cache may serve them; the unique id follows it, so nothing after it is shared.
    system = random.Random(271828)
    shared_ids = [system.randrange(10, high) for _ in range(shared_count)]
    shared_words = " ".join(system.choice(WORDS) for _ in range(shared_count))

    def next_prompt():
        uid = run_id + count[0]
        count[0] += 1
        if args.dataset == "random" and args.endpoint == "completions":
            rest = args.input_tokens - shared_count
            prefix = unique_prefix(uid, 10, high) if rest > 2 * PREFIX_TOKENS else []
            return shared_ids + prefix + [
                rng.randrange(10, high) for _ in range(rest - len(prefix))
            ], args.output_tokens
        tag = f"[{uid:x}] "
        if dataset is not None:
            prompt, reply = dataset[rng.randrange(len(dataset))]
            wanted = max(1, min(args.output_tokens, count_tokens(reply, tokenizer)))
            return cut_text(tag + prompt, args.input_tokens, tokenizer), wanted
        # random (chat) and synthetic: words to the asked length, cut by the tokenizer where there is one
        words = [rng.choice(WORDS) for _ in range(2 * args.input_tokens + 8)]
        system_text = shared_words + " " if shared_words else ""
        return cut_text(system_text + tag + " ".join(words), args.input_tokens, tokenizer), args.output_tokens

    return next_prompt
