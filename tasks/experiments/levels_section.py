"""The experiments section's per-level table: at every concurrency both the campaign and an
experiment's variant served, the decision record's prediction beside the realised change; and, where
a level other than the capture's misses, which input would have to move, and how far, to explain it."""

from __future__ import annotations

from orchestrator.report import md_table
from tasks.decisions.formula import fmt_figure, fmt_ms, value_for
from tasks.decisions.vocabulary import provenance
from tasks.experiments.results import DecisionRecord
from tasks.experiments.verify import LevelCheck, Verification

BAND = (0.8, 1.25)
"""predicted / realised counted as right (issue 31's band)."""

FIXED = frozenset(
    {"tp", "cuda", "quantized", "layers", "moe_layers", "ar_calls", "fits_half_tp", "ar_alternatives", "tpot_ms"}
)
"""Inputs that are facts of the model, the host or the level's own measured TPOT (the realised change
is measured against it): never the one a miss is put down to."""


def levels_table(found: list[Verification], record: DecisionRecord) -> str:
    rows = [
        [
            v.experiment.name,
            f"c={check.concurrency}",
            fmt_ms(check.predicted_ms),
            f"{fmt_ms(check.realised.delta_ms)} [{fmt_ms(check.realised.low_ms)}, {fmt_ms(check.realised.high_ms)}]",
            "n/a" if check.ratio is None else f"{check.ratio:.2f}",
            check.verdict,
        ]
        for v in found
        for check in v.levels
    ]
    served = {check.concurrency for v in found for check in v.levels}
    others = [level.concurrency for level in record.levels if level.concurrency not in served]
    text = ""
    if any(check.concurrency != record.concurrency for v in found for check in v.levels):
        text += (
            "\nAt every level both the campaign and the variant served (the decision record predicted each level"
            " before the experiment ran, from that level's TPOT and the micros at its tokens a step):\n\n"
            + md_table(
                ["experiment", "level", "predicted ms", "realised ms [interval]", "predicted / realised", "verdict"],
                rows,
            )
        )
    if others:
        text += (
            f"\nThe record's predictions at {', '.join(f'c={c}' for c in others)} are not verified: no experiment"
            ' served those levels (an experiment\'s `serving = "single"` serves c=1 only).\n'
        )
    lines = [
        line
        for v in found
        for check in v.levels
        if check.concurrency != record.concurrency and misses(check)
        for line in [level_miss_line(v.experiment.option, v.experiment.name, check, record)]
        if line
    ]
    if lines:
        text += (
            f"\nWhere a level other than the capture's (c={record.concurrency}) misses, there is no trace of it to"
            " read kernel by kernel (`[profile] concurrency` captures at another level); instead, each input of the"
            " formula alone, every other as read at that level, at the value that gives the realised change (the one"
            " responsible: an assumed input if one can explain it, else the one that moves least):\n\n"
            + "\n".join(lines)
            + "\n"
        )
    return text


def misses(check: LevelCheck | Verification) -> bool:
    """Outside the realised interval and outside the band (or the wrong sign): a level's check, or an
    experiment's own (its capture's level)."""
    real = check.realised
    if check.predicted_ms is None or real.delta_ms is None or real.low_ms is None or real.high_ms is None:
        return False
    outside = not real.low_ms <= check.predicted_ms <= real.high_ms
    return outside and (check.ratio is None or not BAND[0] <= check.ratio <= BAND[1])


def level_miss_line(option: str, name: str, check: LevelCheck, record: DecisionRecord) -> str:
    """One missed level's inputs, each at the value that alone would give the realised change."""
    level, prediction = record.level(check.concurrency), record.option(option)
    inputs = level.inputs.get(option) if level else None
    if level is None or not inputs or prediction is None or check.realised.delta_ms is None:
        return ""
    figures = record.figures | inputs
    moves = []
    for input_name, value in inputs.items():
        if input_name in FIXED or value is None:
            continue
        needed = value_for(prediction.formula, inputs, input_name, check.realised.delta_ms)
        origin = provenance(input_name, figures, record.assumptions, record.earlier)
        if input_name in level.scaled:
            origin += f", carried from c={record.concurrency} by the micros' ratio"
        moves.append((input_name, value, needed, origin))
    if not moves:
        return ""

    def move(value: float, needed: float) -> float:
        return abs(needed - value) / abs(value) if value else float("inf")

    reachable = [m for m in moves if m[2] is not None]
    assumed = [m for m in reachable if m[3].startswith("assumed")]
    responsible = (assumed or sorted(reachable, key=lambda m: move(m[1], m[2])))[:1]  # type: ignore[arg-type]
    parts = [
        f"{n} {fmt_figure(v)} → "
        + (f"{fmt_figure(x)}" + (f" ({(x - v) / abs(v) * 100:+.0f}%)" if v else "") if x is not None else "none does")
        + f" ({origin})"
        for n, v, x, origin in moves
    ]
    return (
        f"- **{name}, c={check.concurrency}** (predicted {fmt_ms(check.predicted_ms)} ms, realised"
        f" {fmt_ms(check.realised.delta_ms)}): "
        + "; ".join(parts)
        + (f". Responsible: {responsible[0][0]}." if responsible else ". No input alone reaches it.")
    )
