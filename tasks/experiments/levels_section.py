"""The experiments section's per-level table: at every concurrency both the campaign and an
experiment's variant served, the decision record's prediction beside the realised change."""

from __future__ import annotations

from orchestrator.report import md_table
from tasks.decisions.formula import fmt_ms
from tasks.experiments.results import DecisionRecord
from tasks.experiments.verify import Verification


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
    return text
