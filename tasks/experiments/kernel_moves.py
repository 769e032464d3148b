"""The kernels an experiment moved most, read from the base's and the variant's traces: a change the
option's formula has no input for shows here by name. On the H100 (Llama-8B, 2026-12-06) FP8 KV moved
the MLP's gate/up GEMM, which reads no KV cache, from 82.08 to 85.31 µs a call in two campaigns on one
machine (+0.092 ms a step, as much as the attention kernels' change), where two campaigns on another
machine had it go 82.95 → 81.63: the realised change holds it, the prediction cannot.

The same for the device's idle time inside a step, charged to the kernel it then waited for: on the
H100 (Qwen3-MoE, 2026-12-06) W4A16 saved 0.157 ms of device work at c=1 while its TPOT hardly moved
(+0.008 ms), and the idle before each Machete kernel (4.11 µs, 96 a step: 0.394 ms, against about
0.45 µs before a cuBLAS kernel) is where the rest went; no micro timed that gap (the GEMM micro runs a GEMM
back to back with itself; benchmarks/neighbour_gap_probe.py times one after an RMSNorm, not run yet)."""

from __future__ import annotations

from tasks.analysis.intervals import IDLE_TOP
from tasks.analysis.results import ANALYSIS_BREAKDOWN, Breakdown
from tasks.view import Findings

SHOWN = 3
MIN_MS = 0.02
"""A kernel's move a step worth naming: about the realised intervals' half-width on the H100."""


def kernel_moves_note(base: Findings, variant: Findings) -> str | None:
    """One line: the kernels in both traces' top kernels (rank 0's decode steps, the same whole name)
    whose ms a step moved most, at least ``MIN_MS``; None where a trace is missing or none moved."""
    before, after = _top(base.result(ANALYSIS_BREAKDOWN)), _top(variant.result(ANALYSIS_BREAKDOWN))
    shown = _largest({name: after[name][0] - before[name][0] for name in before.keys() & after.keys()})
    if not shown:
        return None
    parts = [
        f"{_short(name)} {before[name][0]:.3f} → {after[name][0]:.3f} ({delta:+.3f}; p50 {before[name][1]:.2f} →"
        f" {after[name][1]:.2f} µs a call)"
        for delta, name in shown
    ]
    return "the kernels both traces ran that moved most, ms a step: " + "; ".join(parts)


def idle_moves_note(base: Findings, variant: Findings) -> str | None:
    """One line: the kernels whose idle before them (rank 0's decode steps, ms a step) moved most
    between the two traces, at least ``MIN_MS``. Each trace names the ``IDLE_TOP`` kernels waited for
    longest: a kernel the other trace's list leaves out had none there when that list is short, and
    at most its last entry when it is full (the move is counted from there, so a kernel that only
    crossed the cut-off is not news). None where a trace has no idle figures."""
    before, after = _idle(base.result(ANALYSIS_BREAKDOWN)), _idle(variant.result(ANALYSIS_BREAKDOWN))
    if not before or not after:
        return None
    floor, x_floor = _floor(before), _floor(after)
    shown = _largest(
        {name: after.get(name, (x_floor,))[0] - before.get(name, (floor,))[0] for name in before.keys() | after.keys()}
    )
    if not shown:
        return None
    parts = [f"{_short(name)} {_side(before, name, floor)} → {_side(after, name, x_floor)}" for _, name in shown]
    return "the device's idle before a kernel that moved most, ms a step: " + "; ".join(parts)


def _largest(moves: dict[str, float]) -> list[tuple[float, str]]:
    """The ``SHOWN`` largest moves by size (name order on a tie), each at least ``MIN_MS``."""
    ranked = sorted(((delta, name) for name, delta in moves.items()), key=lambda move: (-abs(move[0]), move[1]))
    return [(delta, name) for delta, name in ranked[:SHOWN] if abs(delta) >= MIN_MS]


def _idle(analysis: Breakdown | None) -> dict[str, tuple[float, float, float]]:
    idle = analysis.ranks[0].idle_before if analysis and analysis.ranks else None
    if idle is None:
        return {}
    return {k.name: (k.ms_per_step, k.gaps_per_step, k.mean_us_per_gap) for k in idle.top_kernels}


def _floor(idle: dict[str, tuple[float, float, float]]) -> float:
    """What a kernel the list leaves out can have had: none below a short list, its last entry's."""
    return min(ms for ms, _, _ in idle.values()) if len(idle) >= IDLE_TOP else 0.0


def _side(idle: dict[str, tuple[float, float, float]], name: str, floor: float) -> str:
    if name in idle:
        ms, gaps, us = idle[name]
        return f"{ms:.3f} ({gaps:.0f} gaps of {us:.2f} µs)"
    return f"under {floor:.3f}" if floor else "none"


def _top(analysis: Breakdown | None) -> dict[str, tuple[float, float]]:
    if analysis is None or not analysis.ranks:
        return {}
    return {k.name: (k.ms_per_step, k.p50_us_per_call) for k in analysis.ranks[0].top_kernels}


def _short(name: str) -> str:
    """A kernel's name as far as its first template argument or parenthesis (one after a space stays:
    `Memset (Device)`), at most 60 characters."""
    paren = name.find("(")
    paren = -1 if paren > 0 and name[paren - 1] == " " else paren  # "Memset (Device)" keeps its kind
    cut = min((i for i in (name.find("<"), paren) if i > 0), default=len(name))
    return f"`{name[:cut][:60]}`"
