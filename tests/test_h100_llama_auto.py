"""Issue 31's must-show for the Llama-3.1-8B shape (bf16, dummy weights, TP 1, vLLM 0.26) with `auto` from a
clean work folder, no ledger, at c = 1, 2 and 4 — on a lent H100 80GB (2026-12-07: the H200 asked for was not
lent in two sessions' tries). `SHAPE=llama8b_bf16 GPU_MEM=0.6 benchmarks/gpu_experiments.sh start /tmp/work`
with W4A16 listed; auto added the GPU n-gram drafter and left FP8 KV under its bar, so FP8 KV was listed after
and `resume` ran only its experiment, on the decision record written before any experiment ran
(tests/data/h100_llama8b_auto_experiments.toml). Real GPU measurements, re-read on CPU by
benchmarks/predictions_again.py: every prediction made before its experiment ran."""

from __future__ import annotations

import re
import statistics

import pytest
from stored_runs import DATA, report, rows_by_level, stored_state

from benchmarks.predictions_again import predictions_again


@pytest.fixture(scope="module")
def rows():
    return rows_by_level("h100_llama8b_run5_todo.json.gz", "h100_llama8b_auto_experiments.toml")


def _ratio(row) -> float:
    return row.predicted_ms / row.realised.delta_ms


def test_no_wrong_sign_and_every_row_but_one_edge_within_the_band(rows) -> None:
    """W4A16 1.02 / 1.05 / 1.09, FP8 KV 0.86 / 1.03 / 1.255, the GPU drafter 1.14 / 1.15 / 1.18 at c = 1 / 2 / 4:
    FP8 KV at c=4 just past 1.25 (-0.114 against -0.091 ms, 0.4% of the base's TPOT); the median error 13.7%,
    over the issue's 10%, from the drafter's step cost (assumed 0: an upper bound on the change)."""
    assert sorted(rows) == [(option, level) for option in sorted({o for o, _ in rows}) for level in (1, 2, 4)]
    assert {option for option, _ in rows} == {"fp8_kv_cache", "int4_weights", "speculative_decoding_gpu"}
    ratios = {key: _ratio(row) for key, row in rows.items()}
    outside = {key for key, ratio in ratios.items() if not 0.8 <= ratio <= 1.25}
    assert outside == {("fp8_kv_cache", 4)}, ratios
    assert ratios[("fp8_kv_cache", 4)] < 1.26
    assert not any(row.wrong_sign for row in rows.values())
    assert 0.10 < statistics.median(abs(ratio - 1) for ratio in ratios.values()) < 0.15


def test_the_miss_at_c4_names_the_measured_input_responsible(rows) -> None:
    """FP8 KV's input is measured (the micro's FP8 cache write and attention a layer); its miss at c=4 is read
    from that input, not from an assumption."""
    row = rows[("fp8_kv_cache", 4)]
    assert row.inputs == ""
    assert "Responsible: kv_fp8_layer_delta_us." in row.why


def test_the_drafters_step_cost_is_the_one_input_left_assumed(rows) -> None:
    """As on the H200's Qwen3-MoE: from a clean folder the GPU drafter's step cost is assumed 0, so the
    prediction is an upper bound, high at every level; W4A16 (Machete, dense) and FP8 KV assume nothing."""
    for level in (1, 2, 4):
        spec = rows[("speculative_decoding_gpu", level)]
        assert spec.inputs.startswith("spec_gpu_step_extra_ms assumed")
        assert spec.predicted_ms > spec.realised.delta_ms > 0
        assert rows[("int4_weights", level)].inputs == ""
        assert rows[("int4_weights", level)].realised.delta_ms > 2  # a saving (positive is faster): TPOT 6.4 -> 4.0 ms


def test_the_assumed_zero_step_cost_says_where_the_gain_would_vanish(tmp_path) -> None:
    """An assumption of 0 has no half or double: the findings give the step cost at which the predicted gain is
    0 instead, here tpot_ms x (spec_expected_tokens - 1) - spec_verify_extra_ms (the formula solved by hand, with
    tpot_growth_ms 0), 15.01 ms against the 1.868 the experiment measured: the advice stands."""
    text = report(
        stored_state("h100_llama8b_run5_todo.json.gz", tmp_path), "h100_llama8b_auto_experiments.toml", tmp_path / "r"
    )
    inputs = predictions_again(DATA / "h100_llama8b_run5_todo.json.gz", DATA / "h100_llama8b_auto_experiments.toml")[0]
    spec = inputs.option("speculative_decoding_gpu").inputs
    assert spec["spec_gpu_step_extra_ms"] == 0 and spec["tpot_growth_ms"] == 0
    by_hand = spec["tpot_ms"] * (spec["spec_expected_tokens"] - 1) - spec["spec_verify_extra_ms"]
    line = re.search(
        r"spec_gpu_step_extra_ms = 0 \(assumed, so its half and double are 0 too\): the predicted change is 0 at spec_gpu_step_extra_ms = ([\d.]+)",
        text,
    )
    assert line, text
    assert float(line[1]) == pytest.approx(by_hand, abs=0.01)
    assert 14.9 < by_hand < 15.1
