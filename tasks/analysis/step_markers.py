"""Which annotations mark a trace's steps, and what kind of step each one is.

- `vllm` (the default): vLLM's `execute_context_{n}({tokens})_generation_{m}({tokens})`; decode
  when no prefill tokens, prefill when no decode tokens, mixed when both.
- `profiler-step`: torch.profiler's `ProfilerStep#N` (a training loop's or any `prof.step()`
  caller's, SGLang's scheduler among them); the kind is not in the name.
- `sglang`: SGLang's forward annotations by name (`...decode...`, `...extend...`/`prefill`,
  `...mixed...`), else its `ProfilerStep#N`.
- any other text: a regular expression over annotation names; a named group `kind` whose text
  says decode, prefill/extend or mixed gives the step's kind.
With no annotation matching, the whole trace is one window, and the result says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from orchestrator.errors import InputError

VLLM_STEP = re.compile(r"execute_context_(\d+)\((\d+)\)_generation_(\d+)\((\d+)\)")
PROFILER_STEP = re.compile(r"^ProfilerStep#\d+$")
SGLANG_STEP = re.compile(r"(?P<kind>decode|extend|prefill|mixed)|^ProfilerStep#\d+$", re.I)
BUILT_IN = ("vllm", "profiler-step", "sglang")


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
            context, generation = int(match[2]), int(match[4])
            kind = ("decode" if context == 0 and generation > 0 else
                    "prefill" if generation == 0 and context > 0 else "mixed" if context else "step")
            return kind, float(context), float(generation)
        said = (match.groupdict().get("kind") or "").lower()
        kind = ("decode" if "decode" in said else "prefill" if "extend" in said or "prefill" in said
                else "mixed" if "mixed" in said else "step")
        return kind, 0.0, 0.0


def step_marker(spec: str = "vllm") -> StepMarker:
    """The marker a `--step-marker` value names: a built-in one or a regular expression."""
    if spec == "vllm":
        return StepMarker(spec, VLLM_STEP)
    if spec == "profiler-step":
        return StepMarker(spec, PROFILER_STEP)
    if spec == "sglang":
        return StepMarker(spec, SGLANG_STEP)
    try:
        return StepMarker(spec, re.compile(spec))
    except re.error as err:
        raise InputError(f"--step-marker {spec!r}: not one of {', '.join(BUILT_IN)} nor a valid regular"
                         f" expression ({err}); fix the pattern") from None
