"""The ledger's honest summary: errors of the predictions made before their experiments, per
option and overall, the calibrated figures kept apart, what each prediction rested on, and the
spread of the realised change between repeated campaigns of one configuration."""

from __future__ import annotations

import json
import re

import pytest
from stored_runs import report, stored_state

from tasks.decisions.ledger import LedgerRecord, LevelOutcome, summary_lines


def record(campaign: str, option: str, predicted: float, realised: float, low: float, high: float) -> LedgerRecord:
    return LedgerRecord(
        id=f"{campaign}/{option}",
        campaign=campaign,
        experiment=option,
        option=option,
        change="x",
        model="m 4x256 bf16 TP2",
        hardware="cpu",
        vllm="0.32.0",
        concurrency=1,
        predicted_ms=predicted,
        realised_ms=realised,
        realised_low_ms=low,
        realised_high_ms=high,
        calibrated_ms=realised,
        provenance={
            "moe_w4a16_time_ratio": "measured: gemm_bench, in place of the assumed 0.5",
            "spec_tokens": "assumed",
        },
        recorded_at="2026-12-04T00:00:00Z",
    )


def test_the_summary_is_per_option_with_repeats_and_provenance() -> None:
    records = [
        record("a", "int4_weights", +0.2, -0.4, -0.45, -0.35),  # wrong sign, outside the noise
        record("b", "int4_weights", -0.3, -0.5, -0.55, -0.45),
        record("a", "speculative_decoding", 2.2, 2.0, 1.9, 2.1),
    ]
    lines = summary_lines(records)
    assert lines[0].endswith("predictions made before their experiment: 40.0% (3 records)")  # 150%, 40%, 10%
    int4 = next(line for line in lines if line.startswith("- int4_weights"))
    assert "2 record(s), median error 95.0%" in int4 and "wrong sign outside the noise 1" in int4
    assert "moe_w4a16_time_ratio measured" in int4 and "spec_tokens assumed" in int4
    assert any(line.startswith("median |calibrated") and "not a prediction" in line for line in lines)
    [repeated] = [line for line in lines if line.startswith("repeated:")]
    assert "int4_weights" in repeated and "-0.500 to -0.400 ms" in repeated and "spread 22%" in repeated


def test_the_summary_gives_the_median_over_every_level_served() -> None:
    """Each record's own level (c=1) and the sweep's other levels, in one median: 150%, 40%, 10% at
    c=1 and 50%, 0% at c=2 / c=4 (a level with no prediction left out), so 40.0% over 5."""
    spec = record("a", "speculative_decoding", 2.2, 2.0, 1.9, 2.1)
    spec.levels = [
        LevelOutcome(concurrency=c, predicted_ms=p, realised_ms=r, realised_low_ms=r, realised_high_ms=r)
        for c, p, r in ((1, 2.2, 2.0), (2, 1.0, 2.0), (4, 3.0, 3.0), (8, None, 3.5))
    ]
    records = [
        record("a", "int4_weights", +0.2, -0.4, -0.45, -0.35),
        record("b", "int4_weights", -0.3, -0.5, -0.55, -0.45),
    ]
    lines = summary_lines([*records, spec])
    assert lines[1] == (
        "over every level served (each record's own and the sweep's other levels): median error 40.0% (5 predictions)"
    )
    assert "at the other levels served: median error 25.0% over 2 level(s)" in next(
        line for line in lines if line.startswith("- speculative_decoding")
    )


def test_the_miss_as_a_share_of_tpot_counts_only_records_that_keep_the_tpot() -> None:
    """A change near zero makes the relative error large (0.119 predicted, 0.009 realised: 1222%); beside
    a 4.646 ms step it is 2.37%. Levels count alike; a record written before the TPOT was kept adds none."""
    near_zero = record("a", "int4_weights", 0.119, 0.009, 0.008, 0.020)
    near_zero.base_tpot_ms = 4.646
    near_zero.levels = [
        LevelOutcome(
            concurrency=c, predicted_ms=p, realised_ms=r, realised_low_ms=lo, realised_high_ms=hi, base_tpot_ms=t
        )
        for c, p, r, lo, hi, t in ((1, 0.119, 0.009, 0.008, 0.020, 4.646), (2, 0.957, 0.984, 0.967, 0.988, 6.01))
    ]
    older = record("b", "int4_weights", -0.3, -0.5, -0.55, -0.45)  # no TPOT kept
    lines = summary_lines([near_zero, older])
    [line] = [line for line in lines if line.startswith("median |predicted - realised| as % of the base's TPOT")]
    # 0.110 / 4.646 = 2.368%, 0.027 / 6.01 = 0.449%: the median of two, 1.41%
    assert line == (
        "median |predicted - realised| as % of the base's TPOT, every level: 1.41% (largest 2.37%; 2 predictions,"
        " from the records that keep the TPOT)"
    )
    assert not any("as % of the base's TPOT" in line for line in summary_lines([older]))


def test_an_assumption_an_earlier_campaign_measured_stands_in_for_it(tmp_path) -> None:
    """The stored default campaign judges lower_tp with half_tp_gemm_factor assumed (its GEMM micro
    predates the TP/2 rows). A ledger record of an earlier campaign on the same hardware, shape and
    vLLM that measured the factor (as lower_tp's experiments measured it before they measured the
    added GEMM time itself) puts its value in the assumption's place, named (an earlier run of
    this same configuration counts too); records of another vLLM, written after this campaign
    started, or of an experiment that applied the option otherwise (a user's own change: another
    environment here), do not."""
    from test_findings import FIXTURE, assemble

    from orchestrator.statefile import load_state
    from tasks.decisions.earlier import identity
    from tasks.decisions.ledger import Ledger
    from tasks.view import Findings

    state = load_state(FIXTURE)
    mine = identity(Findings(None, state, tmp_path))  # type: ignore[arg-type]
    started = min(t.started_at for t in state.todos if t.started_at)

    def measured(campaign: str, factor: float, vllm: str | None, when: str, change: str = "TP 1") -> LedgerRecord:
        base = record(campaign, "lower_tp", 0.5, 0.1, 0.0, 0.2)
        return base.model_copy(
            update={
                "id": f"{campaign}/lower_tp/{when}",
                "change": change,
                "model": mine.model,
                "hardware": mine.hardware,
                "vllm": vllm,
                "measured_inputs": {"half_tp_gemm_factor": factor, "comm_ms": 0.8},
                "recorded_at": when,
            }
        )

    before = "2020-01-01T00:00:00+00:00"
    after = started.replace(year=started.year + 1).isoformat()
    ledger = Ledger(
        records=[
            measured("earlier", 1.25, mine.vllm, before),
            measured("other-vllm", 9.0, "0.0.1", before),
            measured(state.campaign, 1.75, mine.vllm, before),  # an earlier run of this configuration
            measured("later", 5.0, mine.vllm, after),
            measured("otherwise", 7.0, mine.vllm, before, change="TP 1; VLLM_CPU_KVCACHE_SPACE=2"),
        ]
    )
    without = assemble(tmp_path / "a")
    (tmp_path / "b" / "reports").mkdir(parents=True)
    (tmp_path / "b" / "reports" / "ledger.json").write_text(ledger.model_dump_json())
    text = assemble(tmp_path / "b")
    row = next(line for line in text.splitlines() if line.startswith("| - | Halve tensor parallelism"))
    # the median of the earlier campaign's 1.25 and the earlier run of this configuration's 1.75
    assert "(earlier record: from half_tp_gemm_factor (median of 2 records, first earlier/lower_tp/2020-01-01" in row, (
        row
    )
    assert "in place of the assumed 2" in row
    before = next(line for line in without.splitlines() if line.startswith("| - | Halve tensor parallelism"))

    def extra(line: str) -> float:
        return float(re.search(r"half_tp_gemm_extra_ms = ([\d.]+)", line).group(1))  # type: ignore[union-attr]

    # (gemm_ms + moe_ms) x (factor - 1): the factor 1.5 carried in place of the assumed 2 halves it
    assert extra(row) == pytest.approx(extra(before) * 0.5, rel=0.01)
    assert "(assumed: from half_tp_gemm_factor)" in before
    assert "measured by an earlier campaign's experiment on the same hardware, shape and vLLM instead" in text
    assert "half_tp_gemm_factor = 2 (assumed): " not in text  # no sensitivity to a measured input


def test_what_an_experiment_measured_of_a_speculative_step_and_of_fp8_kv_stands_in_later(tmp_path) -> None:
    """spec_step_extra_ms (assumed 0: an upper bound) and kv_fp8_layer_delta_us (derived from two
    assumptions; this CPU fixture has no KV micro) as an earlier campaign's experiments measured
    them on the same hardware, shape and vLLM: each stands in its place, named, and the prediction
    moves by exactly what the formula says."""
    from test_findings import FIXTURE, assemble

    from orchestrator.statefile import load_state
    from tasks.decisions.earlier import identity
    from tasks.decisions.ledger import Ledger
    from tasks.view import Findings

    state = load_state(FIXTURE)
    mine = identity(Findings(None, state, tmp_path))  # type: ignore[arg-type]
    from tasks.decisions.earlier import applied_changes
    from tasks.decisions.rules import load_rules

    applied = applied_changes(load_rules(), 2)
    earlier = [
        record("earlier", option, 0.5, 0.1, 0.0, 0.2).model_copy(
            update={
                "id": f"earlier/{option}/2020-01-01",
                "change": applied[option],
                "model": mine.model,
                "hardware": mine.hardware,
                "vllm": mine.vllm,
                "measured_inputs": inputs,
                "recorded_at": "2020-01-01T00:00:00+00:00",
            }
        )
        for option, inputs in (
            ("speculative_decoding", {"spec_step_extra_ms": 1.5}),
            ("fp8_kv_cache", {"kv_fp8_layer_delta_us": 3.9}),
        )
    ]
    without = assemble(tmp_path / "a")
    (tmp_path / "b" / "reports").mkdir(parents=True)
    (tmp_path / "b" / "reports" / "ledger.json").write_text(Ledger(records=earlier).model_dump_json())
    text = assemble(tmp_path / "b")

    def row(document: str, title: str) -> str:
        return next(line for line in document.splitlines() if f" | {title}" in line and "`" in line)

    spec = row(text, "Speculative decoding")
    assert "spec_step_extra_ms = 1.5 (earlier record: earlier/speculative_decoding/2020-01-01" in spec, spec
    assert "spec_step_extra_ms = 0 (assumed)" in row(without, "Speculative decoding")
    fp8 = row(text, "FP8 KV cache")
    assert "kv_fp8_layer_delta_us = 3.9 (earlier record: earlier/fp8_kv_cache/2020-01-01" in fp8, fp8
    assert "in place of the assumptions it is derived from" in fp8
    assert "assumed: from kv_fp8_overhead_us_per_layer and kv_fp8_bytes_ratio" in row(without, "FP8 KV cache")


def test_two_campaigns_of_one_checkpoint_from_different_work_folders_are_repeats() -> None:
    """The H100's two Llama-8B runs served the same W4A16 checkpoint from /tmp/work and /tmp/work2
    (each campaign from a clean folder): one configuration, so their spread is reported; another
    checkpoint (another folder name) is not a repeat."""
    first, second, other = (
        record(c, "int4_weights", 2.6, realised, realised - 0.01, realised + 0.01)
        for c, realised in (("a", 2.451), ("b", 2.467), ("c", 1.0))
    )
    first.change, second.change = "model /tmp/work/models/llama8b_w4a16", "model /tmp/work2/models/llama8b_w4a16"
    other.change = "model /tmp/work/models/llama8b_awq"
    [repeated] = [line for line in summary_lines([first, second, other]) if line.startswith("repeated:")]
    assert "2 campaigns" in repeated and "+2.451 to +2.467 ms" in repeated


def test_a_regenerated_report_says_its_records_are_in_the_ledger_already(tmp_path) -> None:
    """`orchestrate report` a second time adds nothing (the records are there), and its line says so
    instead of "0 record(s) added", which read as if the experiments had left no record. Llama-8B run 6's
    todo file as the H100 left it (three experiments)."""
    state = stored_state("h100_llama8b_run6_todo.json.gz", tmp_path)
    reports = tmp_path / "reports"

    def ledger_line() -> str:
        text = report(state, "h100_llama8b_run6_auto_experiments.toml", reports)
        return next(line for line in text.splitlines() if line.startswith("Ledger: "))

    assert "(3 record(s) added by this document;" in ledger_line()
    assert len(json.loads((tmp_path / "reports" / "ledger.json").read_text())["records"]) == 3
    again = ledger_line()
    assert "(3 record(s) of this campaign's experiments, 0 added by this document, the rest by an earlier" in again
    assert len(json.loads((tmp_path / "reports" / "ledger.json").read_text())["records"]) == 3
