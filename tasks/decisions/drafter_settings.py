"""The n-gram drafter's settings, held twice: in the rules file's [assumptions] (spec_tokens,
prompt_lookup_min/max: what the replay, the verify GEMMs and the drafter micro are computed with)
and in the `--speculative-config` an experiment passes vLLM. They are settings, not assumptions:
the experiment applies them. Where the two disagree, the prediction describes one drafter and the
experiment measures another, and the ledger would record a miss that is none; so the two are
checked against each other when the rules load and when the experiments are planned."""

from __future__ import annotations

import json
from collections.abc import Sequence

SETTINGS = {
    "spec_tokens": "num_speculative_tokens",
    "prompt_lookup_min": "prompt_lookup_min",
    "prompt_lookup_max": "prompt_lookup_max",
}
"""The rules file's name of each drafter setting -> the `--speculative-config` key vLLM reads."""

NGRAM_METHODS = frozenset({"ngram", "ngram_gpu"})
"""The drafters the replay models (prompt lookup, on the CPU or the GPU)."""

FLAG = "--speculative-config"


def speculative_config(extra_args: Sequence[str]) -> dict | None:
    """The JSON `--speculative-config` of ``extra_args`` (either `--flag VALUE` or `--flag=VALUE`);
    None where it is absent or is no JSON object (vLLM itself says what is wrong with it)."""
    text = None
    for index, arg in enumerate(extra_args):
        if arg == FLAG and index + 1 < len(extra_args):
            text = extra_args[index + 1]
        elif arg.startswith(FLAG + "="):
            text = arg.split("=", 1)[1]
    if text is None:
        return None
    try:
        parsed = json.loads(text)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def drafter_mismatch(extra_args: Sequence[str], assumptions: dict[str, float]) -> str | None:
    """What an n-gram `--speculative-config` in ``extra_args`` sets otherwise than the rules'
    [assumptions] (e.g. "num_speculative_tokens 5 against spec_tokens = 3"); None where they agree
    or where no n-gram drafter is configured (another drafter is not replayed: nothing to agree)."""
    config = speculative_config(extra_args)
    if config is None or config.get("method") not in NGRAM_METHODS:
        return None
    for name, key in SETTINGS.items():
        given, stated = config.get(key), assumptions.get(name)
        if given is not None and stated is not None and given != stated:
            return f"{key} {given} against {name} = {stated:g}"
    return None
