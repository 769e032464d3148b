"""The n-gram drafter replayed over recorded outputs (tasks/decisions/ngram_replay.py): a worked
example counted by hand, vLLM's own proposer as the reference, and the replay standing in the
decision record in place of the assumed acceptance."""

from __future__ import annotations

import json
import random
import subprocess
import sys
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


VLLM_REFERENCE = """
import json, random, sys
import numpy as np
from vllm.v1.spec_decode.ngram_proposer import _find_longest_matched_ngram_and_propose_tokens as propose
cases = json.loads(sys.stdin.read())
print(json.dumps([list(map(int, propose(np.array(t, dtype=np.int32), a, b, 1 << 20, k))) for t, a, b, k in cases]))
"""


@pytest.mark.heavy
def test_the_proposer_drafts_what_vllms_own_does() -> None:
    """vLLM's proposer (the installed vllm, in a process of its own) on 2,000 random contexts of
    small vocabularies, so that matches are frequent."""
    if subprocess.run(
        [sys.executable, "-c", "import vllm.v1.spec_decode.ngram_proposer"], capture_output=True
    ).returncode:
        pytest.skip("vLLM's n-gram proposer is not importable here")
    rng = random.Random(7)
    cases = []
    for _ in range(2000):
        vocab, min_n = rng.choice([2, 3, 5, 20]), rng.randint(1, 4)
        tokens = [rng.randrange(vocab) for _ in range(rng.randint(1, 60))]
        cases.append((tokens, min_n, rng.randint(min_n, 6), rng.randint(1, 5)))
    out = subprocess.run(
        [sys.executable, "-c", VLLM_REFERENCE], input=json.dumps(cases), capture_output=True, text=True, check=True
    )
    theirs = json.loads(out.stdout.strip().splitlines()[-1])
    ours = [propose(tokens, a, b, k) for tokens, a, b, k in cases]
    assert sum(x != y for x, y in zip(ours, theirs, strict=True)) == 0


def test_the_replay_stands_in_for_the_assumed_acceptance() -> None:
    rules = load_rules()
    kept = [RequestTokens(prompt=[1, 2, 3, 4], output=[1, 2, 3, 4, 1, 2, 3, 9])]
    figures = SimpleNamespace(single=SimpleNamespace(token_ids=kept))
    measured = replayed_tokens_per_step(figures, rules.assumptions)
    assert measured == pytest.approx(7 / 3)
    values = {"spec_replay_tokens_per_step": measured}
    assert provenance("spec_expected_tokens", values, rules.assumptions).startswith("measured: macro_single")
    assert replayed_tokens_per_step(SimpleNamespace(single=None), rules.assumptions) is None


def test_the_shipped_rules_replay_the_drafter_their_apply_runs() -> None:
    rules = load_rules()
    args = rules.specs["speculative_decoding"].apply.extra_args
    config = json.loads(args[args.index("--speculative-config") + 1])
    assert config["method"] == "ngram"
    assert (config["num_speculative_tokens"], config["prompt_lookup_min"], config["prompt_lookup_max"]) == (
        rules.assumptions["spec_tokens"],
        rules.assumptions["prompt_lookup_min"],
        rules.assumptions["prompt_lookup_max"],
    )
