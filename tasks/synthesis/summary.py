"""The summary at the top of the findings, and the ranked bottleneck analysis."""

from __future__ import annotations

from tasks.analysis.categories import Category
from tasks.analysis.results import CategoryFigures
from tasks.decisions.figures import KeyFigures


def tail_note(category: CategoryFigures) -> str:
    """A sentence when the mean call is mostly tail: the typical call is far cheaper."""
    p50, mean = category.p50_us_per_call, category.mean_us_per_call
    if not p50 or mean is None or mean < 3 * p50:
        return ""
    return (
        f" The typical call takes {p50:.1f} µs (p50): most of the mean is a tail of calls that"
        " waited (for a late rank, a descheduled thread, a queue), not the operation's own cost."
    )


def summary_section(figures: KeyFigures) -> str:
    rank0 = figures.rank0
    lines = ["## Summary\n"]
    dominant = figures.dominant_category
    if rank0 and dominant:
        cat = rank0.categories[dominant]
        comm = rank0.categories.get(Category.COMMUNICATION)
        lines.append(
            f"- Decode steps on rank 0 spend most device time in **{dominant}**:"
            f" {cat.share_pct:.1f}% of decode device time ({cat.calls_per_step:.0f} calls"
            f" a step, {cat.mean_us_per_call:.1f} µs a call, {cat.ms_per_step:.3f} ms a step)." + tail_note(cat)
        )
        between = rank0.between_steps.device_ms_per_step if rank0.between_steps else 0.0
        if between:
            lines.append(
                f"- A decode step's device work on rank 0 is {rank0.device_ms_per_step:.3f} ms inside vLLM's step"
                f" annotation and {between:.3f} ms between annotations (logits and sampling),"
                f" {rank0.device_ms_per_step + between:.3f} ms in all; the shares are of the annotated step."
            )
        if comm and comm.calls_per_step and dominant != Category.COMMUNICATION:
            lines.append(
                f"- Communication is {comm.share_pct:.1f}% of decode device time:"
                f" {comm.calls_per_step:.0f} calls a step at {comm.mean_us_per_call:.1f} µs." + tail_note(comm)
            )
    if figures.decode_tpot_ms:
        lines.append(
            f"- Single-stream TPOT {figures.decode_tpot_ms:.2f} ms"
            f" ({1000 / figures.decode_tpot_ms:.0f} tokens/s a stream)."
        )
    return "\n".join(lines) + "\n" if len(lines) > 1 else ""


def bottleneck_section(figures: KeyFigures) -> str:
    rank0 = figures.rank0
    if not rank0 or not figures.dominant_category:
        return ""
    ranked = sorted(
        ((name, c) for name, c in rank0.categories.items() if c.calls_per_step), key=lambda item: -item[1].share_pct
    )
    lines = [
        "## Bottleneck analysis\n",
        f"The dominant category of decode device time on rank 0 is **{ranked[0][0]}** at"
        f" {ranked[0][1].share_pct:.1f}% ({ranked[0][1].ms_per_step:.3f} ms a step of"
        f" {rank0.device_ms_per_step:.3f} ms). Ranked:\n",
    ]
    lines += [
        f"{i}. {name}: {c.share_pct:.1f}% ({c.calls_per_step:.0f} calls, {c.mean_us_per_call:.1f} µs a call)"
        for i, (name, c) in enumerate(ranked, 1)
    ]
    return "\n".join(lines) + "\n"
