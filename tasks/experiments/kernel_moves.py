"""The kernels an experiment moved most, read from the base's and the variant's traces: a change the
option's formula has no input for shows here by name. On the H100 (Llama-8B, 2026-12-06) FP8 KV moved
the MLP's gate/up GEMM, which reads no KV cache, from 82.08 to 85.31 µs a call in two campaigns on one
machine (+0.092 ms a step, as much as the attention kernels' change), where two campaigns on another
machine had it go 82.95 → 81.63: the realised change holds it, the prediction cannot."""

from __future__ import annotations

from tasks.analysis.results import ANALYSIS_BREAKDOWN, Breakdown
from tasks.view import Findings

SHOWN = 3
MIN_MS = 0.02
"""A kernel's move a step worth naming: about the realised intervals' half-width on the H100."""


def kernel_moves_note(base: Findings, variant: Findings) -> str | None:
    """One line: the kernels in both traces' top kernels (rank 0's decode steps, the same whole name)
    whose ms a step moved most, at least ``MIN_MS``; None where a trace is missing or none moved."""
    before, after = _top(base.result(ANALYSIS_BREAKDOWN)), _top(variant.result(ANALYSIS_BREAKDOWN))
    moves = sorted(
        ((after[name][0] - before[name][0], name) for name in before.keys() & after.keys()),
        key=lambda move: (-abs(move[0]), move[1]),
    )
    shown = [(delta, name) for delta, name in moves[:SHOWN] if abs(delta) >= MIN_MS]
    if not shown:
        return None
    parts = [
        f"{_short(name)} {before[name][0]:.3f} → {after[name][0]:.3f} ({delta:+.3f}; p50 {before[name][1]:.2f} →"
        f" {after[name][1]:.2f} µs a call)"
        for delta, name in shown
    ]
    return "the kernels both traces ran that moved most, ms a step: " + "; ".join(parts)


def _top(analysis: Breakdown | None) -> dict[str, tuple[float, float]]:
    if analysis is None or not analysis.ranks:
        return {}
    return {k.name: (k.ms_per_step, k.p50_us_per_call) for k in analysis.ranks[0].top_kernels}


def _short(name: str) -> str:
    """A kernel's name as far as its first template argument or parenthesis, at most 60 characters."""
    cut = min((i for i in (name.find("<"), name.find("(")) if i > 0), default=len(name))
    return f"`{name[:cut][:60]}`"
