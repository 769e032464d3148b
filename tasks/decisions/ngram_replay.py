"""The n-gram (prompt-lookup) drafter replayed over the campaign's own outputs: the tokens a
speculative step would yield, known before the experiment runs.

vLLM's n-gram proposer (v1/spec_decode/ngram_proposer.py) looks for the longest suffix of the
context, `prompt_lookup_min` to `prompt_lookup_max` tokens long, that occurred earlier in the
context (the earliest occurrence of that length), and drafts the (up to) `num_speculative_tokens`
tokens that followed it. With greedy sampling the target accepts a draft's tokens while they equal
what it would have generated, which is the output the base campaign recorded; a step then yields
the accepted tokens and one more. What this cannot know: sampling with temperature (acceptance is
then probabilistic), a draft model or an EAGLE/MTP head (their drafts are another model's), and a
server whose greedy output changes under batched verification; those stay assumptions until an
experiment measures them.
"""

from __future__ import annotations

from dataclasses import dataclass


def propose(tokens: list[int], min_n: int, max_n: int, k: int) -> list[int]:
    """The draft vLLM's n-gram proposer makes for ``tokens`` (the context so far)."""
    total = len(tokens)
    if total < min_n or k <= 0:
        return []
    for n in range(min(max_n, total - 1), min_n - 1, -1):
        suffix = tokens[total - n :]
        # An earlier occurrence ends before the last token; it may overlap the suffix. The earliest:
        # candidates by the suffix's first token (list.index scans at C speed), then the whole n-gram.
        start = -1
        while True:
            try:
                start = tokens.index(suffix[0], start + 1, total - n)
            except ValueError:
                break
            if tokens[start : start + n] == suffix:
                follow = start + n
                return tokens[follow : follow + min(k, total - follow)]
    return []


@dataclass(frozen=True)
class Replay:
    """The drafter over recorded requests: decode steps, the steps with a draft, tokens accepted."""

    requests: int
    decode_tokens: int
    """Output tokens after the first (the first comes from the prefill, not a decode step)."""
    steps: int
    drafts: int
    accepted: int

    @property
    def tokens_per_step(self) -> float:
        """What a speculative decode step yields on average: TPOT's divisor."""
        return self.decode_tokens / self.steps if self.steps else 1.0

    @property
    def mean_acceptance_length(self) -> float | None:
        """1 + accepted / drafts: vLLM's `spec_decode` mean acceptance length, for the check."""
        return 1 + self.accepted / self.drafts if self.drafts else None


def replay_request(prompt: list[int], output: list[int], min_n: int, max_n: int, k: int) -> Replay:
    """Greedy verification of the drafter's proposals against ``output``, step by step."""
    generated = 1  # the prefill's token
    steps = drafts = accepted = 0
    while generated < len(output):
        draft = propose(prompt + output[:generated], min_n, max_n, k)
        took = 0
        while took < len(draft) and generated + took < len(output) and draft[took] == output[generated + took]:
            took += 1
        steps += 1
        drafts += 1 if draft else 0
        accepted += took
        generated += took + 1  # the accepted tokens and the target's own next one
    return Replay(1, max(0, len(output) - 1), steps, drafts, accepted)


def replay(requests: list[tuple[list[int], list[int]]], min_n: int, max_n: int, k: int) -> Replay | None:
    """Every request replayed, pooled (token-weighted); None without a request of two tokens."""
    done = [replay_request(p, o, min_n, max_n, k) for p, o in requests if len(o) >= 2]
    if not done:
        return None
    return Replay(
        len(done),
        sum(r.decode_tokens for r in done),
        sum(r.steps for r in done),
        sum(r.drafts for r in done),
        sum(r.accepted for r in done),
    )
