"""Where each millisecond of TPOT goes: the decode-step model.

Rank 0's decode step from the trace, split so the rows add up to the TPOT measured while the
profiler recorded (same requests, same concurrency):
  Σ categories' typical calls (calls x p50)
+ the tails above the typical call (for collectives: waiting for the other ranks)
+ overlap between streams (union of busy time minus the sum; negative or 0)
+ host time inside the step (wall minus the union: launches, Python, idle)
+ device work between steps (vLLM 0.26 computes logits and samples after the annotation)
+ the rest, outside any step (scheduling, API server, detokenisation, streaming): TPOT minus the above.
Below it, the floor the weights imply (bytes a step / measured copy bandwidth) and the profiler's
own cost (TPOT without it at the same concurrency).
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.report import md_table
from tasks.analysis.categories import Category
from tasks.decisions.estimates import category_ms, typical_ms, weight_bytes_per_step
from tasks.decisions.figures import KeyFigures
from tasks.view import fmt


@dataclass
class StepRow:
    component: str
    ms: float
    calls: float | None = None
    us_a_call: float | None = None
    how: str = ""


def step_rows(figures: KeyFigures) -> tuple[list[StepRow], float] | None:
    """The rows and the TPOT they add up to; None without a trace or a profiled TPOT."""
    rank0, tpot = figures.rank0, figures.profiled_tpot_ms or figures.capture_tpot_ms
    if rank0 is None or not tpot:
        return None
    rows: list[StepRow] = []
    for name, category in rank0.categories.items():
        if not category.calls_per_step:
            continue
        if name == Category.COMMUNICATION:
            # A collective repeats one op: its mean above the p50 is waiting for a late rank.
            typical = typical_ms(category)
            rows.append(
                StepRow(
                    "communication: typical calls",
                    typical,
                    category.calls_per_step,
                    category.p50_us_per_call,
                    "calls a step x p50 µs a call",
                )
            )
            rows.append(
                StepRow(
                    "communication: waiting above the typical call",
                    category.ms_per_step - typical,
                    how="calls x (mean - p50): a collective waiting for a late rank",
                )
            )
            continue
        rows.append(
            StepRow(
                name,
                category.ms_per_step,
                category.calls_per_step,
                category.mean_us_per_call,
                "calls a step x mean µs a call",
            )
        )
    rows.append(
        StepRow(
            "overlap between streams",
            rank0.busy_union_ms_per_step - rank0.device_ms_per_step,
            how="union of busy time - sum of device work (0 on one stream)",
        )
    )
    rows.append(
        StepRow(
            "host time inside the step",
            rank0.wall_ms_per_step - rank0.busy_union_ms_per_step,
            how="wall step - union of busy time: launches, Python, idle",
        )
    )
    between = rank0.between_steps.device_ms_per_step if rank0.between_steps else 0.0
    rows.append(StepRow("device work between steps", between, how="after the step's annotation (logits, sampling)"))
    explained = sum(row.ms for row in rows)
    rest = tpot - explained
    rows.append(
        StepRow(
            "rest, outside any step (unexplained by the trace)",
            rest,
            how="TPOT - the rows above: "
            + (
                "time between steps (scheduling, API server, detokenisation, streaming)"
                if rest >= 0
                else "negative: a token arrives faster than a step's annotated span, so steps"
                " overlap the next one's preparation (async scheduling)"
            ),
        )
    )
    return rows, tpot


def step_model_section(figures: KeyFigures) -> str:
    built = step_rows(figures)
    if built is None:
        return ""
    rows, tpot = built
    rank0 = figures.rank0
    table = [
        [
            row.component,
            fmt(row.calls, 1) if row.calls is not None else "",
            fmt(row.us_a_call, 1) if row.us_a_call is not None else "",
            f"{row.ms:.3f}",
            f"{row.ms / tpot * 100:.1f}",
            row.how,
        ]
        for row in rows
    ]
    table.append(
        [
            "**TPOT while profiling**",
            "",
            "",
            f"**{tpot:.3f}**",
            "100.0",
            f"mean of the {figures.capture_concurrency}-concurrent requests the profiler recorded",
        ]
    )
    text = (
        "## Where TPOT goes (decode-step model)\n\nRank 0's decode step from its trace, split so the rows"
        f" add up to the TPOT of the requests recorded (c={figures.capture_concurrency}); the last row is"
        " what no step annotation covers.\n\n"
        + md_table(["component", "calls a step", "µs a call", "ms", "% of TPOT", "how"], table)
    )
    notes = []
    unprofiled = figures.tpot_by_concurrency.get(figures.capture_concurrency)
    if unprofiled:
        notes.append(
            f"TPOT without the profiler at c={figures.capture_concurrency}: {unprofiled:.3f} ms"
            f" (profiled/unprofiled = {tpot / unprofiled:.2f})."
        )
    shapes = figures.model.shapes if figures.model else None
    if shapes and figures.gemm and figures.gemm.copy_ceiling_gbps:
        weight_bytes = weight_bytes_per_step(shapes, rank0.decode_tokens_per_step or 1)
        floor = weight_bytes / (figures.gemm.copy_ceiling_gbps * 1e6)
        notes.append(
            f"Physical floor: a rank reads {weight_bytes / 1e6:,.2f} MB of weights a step; at the"
            f" measured copy bandwidth ({figures.gemm.copy_ceiling_gbps:.1f} GB/s, read + write) that is"
            f" {floor:.4f} ms, so TPOT is {tpot / floor:,.2f}x the floor"
            f" (GEMM trace time {category_ms(figures, 'gemm') + category_ms(figures, 'moe'):.3f} ms a step)."
        )
    if figures.breakdown and len(figures.breakdown.ranks) > 1:
        imbalance = figures.breakdown.imbalance
        notes.append(
            f"Ranks: device work {imbalance.device_ms_per_step_min:.3f} to"
            f" {imbalance.device_ms_per_step_max:.3f} ms a step; communication share "
            + ", ".join(f"{v:.1f}%" for v in imbalance.communication_share_pct_by_rank)
            + ": the rank with the larger share waits for the other."
        )
    return text + ("\n" + "\n\n".join(notes) + "\n" if notes else "")
