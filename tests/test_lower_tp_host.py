"""lower_tp's host saving at TP 2 measured by the campaign's own trace: a step's time outside the
traced rank (TPOT less the step wall), which vLLM's single-process executor at TP 1 does without,
in place of the assumed 0 (over 15 stored runs of the embedded default, lower_tp's median error went
from 60% to 10.6%: benchmarks/results/lower_tp_check_cpu.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_findings import FIXTURE, assemble

from orchestrator.statefile import load_state
from tasks.decisions.estimates import half_tp_host_saving_ms, rule_figures
from tasks.decisions.figures import key_figures
from tasks.decisions.rules import load_rules
from tasks.decisions.vocabulary import provenance
from tasks.view import Findings


def test_the_step_time_outside_the_rank_is_the_host_saving_at_tp2(tmp_path: Path) -> None:
    rules = load_rules()
    values = rule_figures(key_figures(Findings(None, load_state(FIXTURE), tmp_path)), rules.assumptions)  # type: ignore[arg-type]
    assert values["tp"] == 2 and rules.assumptions["half_tp_host_saving_ms"] == 0
    gap = values["tpot_ms"] - values["step_wall_ms"]
    assert gap > 0.1  # the stored default: TPOT above the traced step
    assert values["half_tp_host_saving_ms"] == pytest.approx(gap)
    where = provenance("half_tp_host_saving_ms", values, rules.assumptions)
    assert where == "measured: analysis_breakdown, in place of the assumed 0"
    row = next(line for line in assemble(tmp_path / "a").splitlines() if line.startswith("| - | Halve tensor"))
    assert f"half_tp_host_saving_ms = {gap:.4g} (measured: analysis_breakdown, in place of the assumed 0)" in row


@pytest.mark.parametrize(
    ("figures", "expected"),
    [
        ({"tp": 2, "tpot_ms": 3.6, "step_wall_ms": 3.1}, 0.5),
        ({"tp": 2, "tpot_ms": 3.7, "step_wall_ms": 3.8}, 0.0),  # the profiler stretched the step past TPOT
        ({"tp": 4, "tpot_ms": 3.6, "step_wall_ms": 3.1}, None),  # TP 2 keeps the worker processes
        ({"tp": 2, "tpot_ms": 3.6, "step_wall_ms": None}, None),  # no trace: the assumption (or the ledger)
    ],
)
def test_only_tp2_with_a_trace_measures_it(figures: dict, expected: float | None) -> None:
    found = half_tp_host_saving_ms(figures)
    assert found == (pytest.approx(expected) if expected is not None else None)
