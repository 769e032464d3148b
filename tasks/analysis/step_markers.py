"""Which annotations mark a trace's steps, and what kind of step each one is.

- `vllm` (the campaign's): vLLM's `execute_context_{n}(...)_generation_{m}(...)`, whatever the
  parentheses hold (token counts on most builds, `888_788544` on some: tokens and their square;
  TraceLens' splits write `execute_32_context_0(sq0sk0...)`); the kind comes from the request
  counts n and m: decode when no context requests, prefill when no generation requests, mixed
  when both. The tokens are the first number in each parenthesis.
- `sglang`: SGLang's `step[DECODE bs=32]` / `step[EXTEND bs=15 toks=15360]` (a mixed batch is
  `MIXED`), else forward annotations whose name says decode, extend/prefill or mixed, else its
  `ProfilerStep#N`.
- `profiler-step`: torch.profiler's `ProfilerStep#N` (any `prof.step()` caller); the kind is not
  in the name.
- `auto` (`orchestrate analyze`'s default): the first of vllm, sglang's `step[...]` and
  profiler-step with an annotation in the trace.
- any other text: a regular expression over annotation names, e.g. `^decode_step_\\d+$`; a named
  group `kind` whose text says decode, prefill/extend or mixed gives the step's kind.
With no annotation matching, the whole trace is one window, and the result says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from orchestrator.errors import InputError

VLLM_STEP = re.compile(r"execute_(?:\d+_)?context_(\d+)\(([^)]*)\)_generation_(\d+)\(([^)]*)\)")
PROFILER_STEP = re.compile(r"^ProfilerStep#\d+$")
SGLANG_BATCH = re.compile(r"^step\[(?P<kind>[A-Za-z_]+)[^\]]*\]")
SGLANG_STEP = re.compile(
    r"^step\[(?P<kind>[A-Za-z_]+)[^\]]*\]|(?P<said>decode|extend|prefill|mixed)"
    r"|^ProfilerStep#\d+$",
    re.I,
)
FIRST_NUMBER = re.compile(r"\d+")
BATCH_SIZE = re.compile(r"\bbs=(\d+)")
BATCH_TOKENS = re.compile(r"\btoks=(\d+)")
BUILT_IN = ("auto", "vllm", "sglang", "profiler-step")


@dataclass(frozen=True)
class StepMarker:
    spec: str
    pattern: re.Pattern[str]

    def matches(self, name: str) -> bool:
        return self.pattern.search(name) is not None

    def kind(self, name: str) -> tuple[str, float, float]:
        """(kind, prefill tokens, decode tokens) of a step named ``name``; kind is 'decode',
        'prefill', 'mixed' or 'step' (the name does not say)."""
        match = self.pattern.search(name)
        if match is None:
            return "step", 0.0, 0.0
        if self.spec == "vllm":
            context, generation = int(match[1]), int(match[3])
            kind = (
                "decode"
                if context == 0 and generation > 0
                else "prefill"
                if generation == 0 and context > 0
                else "mixed"
                if context
                else "step"
            )
            return kind, _first_number(match[2]), _first_number(match[4])
        groups = match.groupdict()
        said = (groups.get("kind") or groups.get("said") or "").lower()
        kind = (
            "decode"
            if "decode" in said
            else "prefill"
            if "extend" in said or "prefill" in said
            else "mixed"
            if "mixed" in said
            else "step"
        )
        if self.spec != "sglang":
            return kind, 0.0, 0.0
        batch = BATCH_SIZE.search(name)
        tokens = BATCH_TOKENS.search(name)
        return (
            kind,
            float(tokens[1]) if tokens and kind != "decode" else 0.0,
            float(batch[1]) if batch and kind == "decode" else 0.0,
        )


def _first_number(text: str) -> float:
    found = FIRST_NUMBER.search(text)
    return float(found[0]) if found else 0.0


def step_marker(spec: str = "vllm") -> StepMarker:
    """The marker a `--step-marker` value names: a built-in one or a regular expression."""
    if spec in ("vllm", "auto"):
        return StepMarker(spec, VLLM_STEP)
    if spec == "profiler-step":
        return StepMarker(spec, PROFILER_STEP)
    if spec == "sglang":
        return StepMarker(spec, SGLANG_STEP)
    try:
        return StepMarker(spec, re.compile(spec))
    except re.error as err:
        raise InputError(
            f"--step-marker {spec!r}: not one of {', '.join(BUILT_IN)} nor a valid regular"
            f" expression ({err}); fix the pattern, e.g. '^decode_step_\\d+$'"
        ) from None


def resolve(marker: StepMarker, names: set[str]) -> StepMarker:
    """`auto`: the first built-in marker with an annotation among ``names`` (vLLM's, SGLang's
    batch steps, torch's ProfilerStep), else vLLM's (which then finds none, and says so)."""
    if marker.spec != "auto":
        return marker
    for spec, pattern in (("vllm", VLLM_STEP), ("sglang", SGLANG_BATCH), ("profiler-step", PROFILER_STEP)):
        if any(pattern.search(name) for name in names):
            return step_marker(spec)
    return step_marker("vllm")
