"""Predictions at every concurrency served (tasks/decisions/levels.py), on the stored default
campaign (its trace at c=1, its sweep at 1, 2, 4 and 8): each level's own TPOT, the micros at its
own tokens a step, the traced GEMM time carried by the GEMM micro's own ratio, and no figure that
only a trace at that level could give."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_findings import FIXTURE, assemble

from orchestrator.statefile import load_state
from tasks.decisions.decide import decide
from tasks.decisions.estimates import gemm_ms_at, rule_figures
from tasks.decisions.figures import key_figures
from tasks.decisions.levels import level_figures
from tasks.decisions.record import predictions_by_level
from tasks.decisions.rules import load_rules
from tasks.view import Findings


def figures_of_fixture(tmp_path: Path):
    return key_figures(Findings(None, load_state(FIXTURE), tmp_path))  # type: ignore[arg-type]


def test_a_level_reads_its_own_tpot_and_the_micros_at_its_tokens(tmp_path: Path) -> None:
    figures = figures_of_fixture(tmp_path)
    rules = load_rules()
    assert figures.capture_concurrency == 1 and sorted(figures.tpot_by_concurrency) == [1, 2, 4, 8]
    capture = rule_figures(figures, rules.assumptions)
    same, scaled_none = level_figures(figures, rules.assumptions, 1)
    assert same == capture and scaled_none == []
    at8, scaled = level_figures(figures, rules.assumptions, 8)
    assert at8["tpot_ms"] == figures.tpot_by_concurrency[8] != capture["tpot_ms"]
    shapes, gemm = figures.model.shapes, figures.gemm
    micro_ratio = gemm_ms_at(shapes, gemm, 8) / gemm_ms_at(shapes, gemm, 1)
    assert at8["gemm_ms"] == pytest.approx(capture["gemm_ms"] * micro_ratio)
    assert {"gemm_ms", "comm_ms", "attention_ms"} <= set(scaled)
    # what only a trace at c=8 could say is not made up
    assert at8["comm_wait_min_rank_ms"] is None and at8["step_wall_ms"] is None
    levels = {level.concurrency: level for level in predictions_by_level(figures, rules)}
    assert levels[8].gains_ms["rank_alignment"] is None and levels[1].gains_ms["rank_alignment"] is not None
    # the capture's level is the record's own prediction
    assert levels[1].gains_ms == {o.id: o.gain_ms for o in decide(capture, rules)}


def test_the_decision_section_lists_every_level(tmp_path: Path) -> None:
    text = assemble(tmp_path)
    assert "at every concurrency served" in text
    header = next(line for line in text.splitlines() if line.startswith("| option | c=1 |"))
    assert header.split("|")[2:6] == [" c=1 ", " c=2 ", " c=4 ", " c=8 "]
