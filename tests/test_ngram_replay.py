"""The n-gram drafter replayed over recorded outputs (tasks/decisions/ngram_replay.py): a worked
example counted by hand, vLLM's own proposer as the reference, and the replay standing in the
decision record in place of the assumed acceptance."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tasks.decisions.estimates import replayed_tokens_per_step
from tasks.decisions.ngram_replay import propose, replay, replay_request
from tasks.decisions.rules import load_rules
from tasks.decisions.vocabulary import provenance
from tasks.macro.results import RequestTokens


def test_a_worked_example_counted_by_hand() -> None:
    """prompt 1 2 3 4, output 1 2 3 4 1 2 3 9; lookup 2-4 tokens, 3 drafted:
    step 1, context 1 2 3 4 | 1: no suffix of 2-4 tokens occurred before: no draft, 1 token.
    step 2, context ... | 1 2: `1 2` occurred at the start, followed by 3 4 1: all three match the
      output (3 4 1), then the target's own token: 4 tokens.
    step 3, context ... | 1 2 3 4 1 2: `3 4 1 2` (the longest, 4) occurred at position 2, followed
      by 3 4 1: `3` matches, `4` is not the output's `9`: 1 accepted, then the target's 9: 2 tokens.
    7 decode tokens (the first came from the prefill) in 3 steps; 2 drafts, 4 accepted."""
    found = replay_request([1, 2, 3, 4], [1, 2, 3, 4, 1, 2, 3, 9], min_n=2, max_n=4, k=3)
    assert (found.decode_tokens, found.steps, found.drafts, found.accepted) == (7, 3, 2, 4)
    assert found.tokens_per_step == pytest.approx(7 / 3)
    assert found.mean_acceptance_length == 3.0
    assert propose([1, 2, 3, 4, 1, 2], 2, 4, 3) == [3, 4, 1]
    assert propose([5, 6], 2, 4, 3) == []  # nothing earlier to match


def test_pooled_over_requests_token_weighted() -> None:
    pooled = replay([([1, 2, 3, 4], [1, 2, 3, 4, 1, 2, 3, 9]), ([7], [8, 9])], 2, 4, 3)
    assert pooled is not None and (pooled.requests, pooled.decode_tokens, pooled.steps) == (2, 8, 4)
    assert replay([([1], [2])], 2, 4, 3) is None  # one output token: no decode step to speculate on


def random_contexts(count: int, batch: int) -> list[tuple[list[list[int]], int, int, int]]:
    """``count`` batches of ``batch`` random contexts of small vocabularies (so that matches are
    frequent), each with a drafter's (min_n, max_n, k)."""
    rng = random.Random(7)
    cases = []
    for _ in range(count):
        vocab, min_n = rng.choice([2, 3, 5, 20]), rng.randint(1, 4)
        seqs = [[rng.randrange(vocab) for _ in range(rng.randint(1, 60))] for _ in range(batch)]
        cases.append((seqs, min_n, rng.randint(min_n, 6), rng.randint(1, 5)))
    return cases


def vllms_drafts(module: str, script: str, cases: list) -> list:
    """What ``script`` (vLLM's drafter over the cases on stdin) prints, run in a process of its own
    (importing vLLM here would change this test process); skipped where ``module`` is missing. One
    process, not an import check first: importing vLLM takes seconds."""
    out = subprocess.run([sys.executable, "-c", script], input=json.dumps(cases), capture_output=True, text=True)
    missing = re.search(r"ModuleNotFoundError: No module named '([\w.]+)'", out.stderr)
    if out.returncode and missing and f"{module}.".startswith(f"{missing[1]}."):  # vllm, or a part of the path
        pytest.skip(f"{module} is not importable here")
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


VLLM_REFERENCE = """
import json, sys
import numpy as np
from vllm.v1.spec_decode.ngram_proposer import _find_longest_matched_ngram_and_propose_tokens as propose
print(json.dumps([[list(map(int, propose(np.array(t, dtype=np.int32), a, b, 1 << 20, k))) for t in seqs]
                  for seqs, a, b, k in json.loads(sys.stdin.read())]))
"""

VLLM_GPU_REFERENCE = """
import json, sys
import torch
from vllm.v1.spec_decode.ngram_proposer_gpu import NgramGPUKernel
find = NgramGPUKernel._find_first_and_extract_all_n_parallel  # self is not read: called on CPU tensors
out = []
for seqs, a, b, k in json.loads(sys.stdin.read()):
    width = max(max(map(len, seqs)), b + 1)
    ids = torch.tensor([s + [0] * (width - len(s)) for s in seqs])
    drafts = find(None, ids, torch.tensor([len(s) for s in seqs]), a, b, k).tolist()
    out.append([[t for t in d if t >= 0] for d in drafts])
print(json.dumps(out))
"""


@pytest.mark.heavy
@pytest.mark.parametrize(
    ("module", "script", "count", "batch"),
    [
        # the CPU drafter (numba), one context a call, on 2,000 contexts
        ("vllm.v1.spec_decode.ngram_proposer", VLLM_REFERENCE, 2000, 1),
        # the GPU drafter (`ngram_gpu`, the option on CUDA hosts: the suffix n-grams searched in
        # parallel, the earliest occurrence of each length, the longest that matched), its tensor
        # code on CPU tensors, four contexts to a padded batch as the GPU's is, on 1,200 contexts
        ("vllm.v1.spec_decode.ngram_proposer_gpu", VLLM_GPU_REFERENCE, 300, 4),
    ],
    ids=["cpu-drafter", "gpu-drafter"],
)
def test_the_replay_drafts_what_vllms_drafters_do(module: str, script: str, count: int, batch: int) -> None:
    cases = random_contexts(count, batch)
    theirs = vllms_drafts(module, script, cases)
    ours = [[propose(tokens, a, b, k) for tokens in seqs] for seqs, a, b, k in cases]
    assert sum(x != y for mine, other in zip(ours, theirs, strict=True) for x, y in zip(mine, other, strict=True)) == 0
    assert sum(1 for drafts in ours for draft in drafts if draft) > len(ours) * batch / 2  # most contexts drafted


def test_the_replay_stands_in_for_the_assumed_acceptance() -> None:
    rules = load_rules()
    kept = [RequestTokens(prompt=[1, 2, 3, 4], output=[1, 2, 3, 4, 1, 2, 3, 9])]
    figures = SimpleNamespace(single=SimpleNamespace(token_ids=kept))
    measured = replayed_tokens_per_step(figures, rules.assumptions)
    assert measured == pytest.approx(7 / 3)
    values = {"spec_replay_tokens_per_step": measured}
    assert provenance("spec_expected_tokens", values, rules.assumptions).startswith("measured: macro_single")
    assert replayed_tokens_per_step(SimpleNamespace(single=None), rules.assumptions) is None


@pytest.mark.parametrize(
    ("option", "method"), [("speculative_decoding", "ngram"), ("speculative_decoding_gpu", "ngram_gpu")]
)
def test_the_shipped_rules_replay_the_drafter_their_apply_runs(option: str, method: str) -> None:
    rules = load_rules()
    args = rules.specs[option].apply.extra_args
    config = json.loads(args[args.index("--speculative-config") + 1])
    assert config["method"] == method
    assert (config["num_speculative_tokens"], config["prompt_lookup_min"], config["prompt_lookup_max"]) == (
        rules.assumptions["spec_tokens"],
        rules.assumptions["prompt_lookup_min"],
        rules.assumptions["prompt_lookup_max"],
    )


def test_the_variants_tokens_a_step_are_the_fewer_of_its_stream_and_its_counters() -> None:
    """The H200's Qwen3-MoE variant at c=1 (24 requests of 64 tokens): 450 streamed chunks after
    the requests' first carried the 1512 decode tokens, 3.36 a step, as the drafter replayed over
    the base's outputs predicted (3.349); vLLM's counters (1104 accepted) give 3.706, because its
    scheduler counts a step's accepted drafts before trimming them at max_tokens. Without a chunk
    count (a run stored before it was kept), the counters stand alone."""
    from tasks.experiments.verify import spec_tokens_per_step
    from tasks.macro.results import Distribution, LevelSummary, SpecDecode

    counters = SpecDecode(drafts=384, draft_tokens=1104, accepted_tokens=1104, mean_acceptance_length=3.875)
    level = LevelSummary.model_construct(
        output_tokens=1536, completed=24, itl_ms=Distribution(count=450), spec_decode=counters
    )
    assert spec_tokens_per_step(level) == pytest.approx(1512 / 450)
    no_chunks = level.model_copy(update={"itl_ms": Distribution(count=0)})
    assert spec_tokens_per_step(no_chunks) == pytest.approx(1512 / (1512 - 1104))
    # A client that fell behind got two steps' tokens in one chunk now and then (vLLM merges a
    # request's outputs the client has not read yet): 300 chunks would say 5.04 tokens a step, more
    # than 3 drafts and the target's own token can make; the counters' 3.706 bounds it.
    merged = level.model_copy(update={"itl_ms": Distribution(count=300)})
    assert spec_tokens_per_step(merged) == pytest.approx(1512 / (1512 - 1104))


def test_the_replay_over_the_h200_base_outputs_matches_the_steps_the_variant_streamed() -> None:
    """Checked against a direct count on real data: the drafter replayed over the base campaign's
    16 recorded outputs (the H200's Qwen3-MoE, dummy weights: each output a 2-token cycle) predicts
    the tokens a step that the n-gram variant's stream then showed (1512 decode tokens in 450
    chunks), within 1%."""
    from tasks.decisions.ngram_replay import replay

    data = json.loads((Path(__file__).parent / "data" / "h200_qwen3moe_spec_stream.json").read_text())
    drafter = data["drafter"]
    found = replay(
        [(r["prompt"], r["output"]) for r in data["base_token_ids"]],
        drafter["prompt_lookup_min"],
        drafter["prompt_lookup_max"],
        drafter["num_speculative_tokens"],
    )
    variant = data["variant"]
    counted = (variant["output_tokens"] - variant["completed"]) / variant["chunks_after_first"]
    assert found is not None and found.tokens_per_step == pytest.approx(counted, rel=0.01)
    # the counters' figure is 10% off the same count: they count drafts accepted past max_tokens
    decode = variant["output_tokens"] - variant["completed"]
    from_counters = decode / (decode - variant["spec_decode"]["accepted_tokens"])
    assert from_counters / counted > 1.09
