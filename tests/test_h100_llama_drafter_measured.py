"""Issue 31's must-show for the Llama-3.1-8B shape (bf16, dummy weights, TP 1, vLLM 0.26) with `auto` from a
clean work folder, no ledger, at c = 1, 2 and 4, once the micro phase times the GPU n-gram drafter before the
experiment — on a lent H100 80GB (2026-12-07: the H200 asked for was not lent). Run 6:
`SHAPE=llama8b_bf16 GPU_MEM=0.6 benchmarks/gpu_experiments.sh start /tmp/work` (auto, FP8 KV and W4A16 listed;
auto ran the three). Run 7, on the same machine right after, from a second clean folder: `MODE=spec`, the drafter's
experiment alone. Real GPU measurements, re-read on CPU by benchmarks/predictions_again.py: every prediction made
before its experiment ran (each run's ledger.json, written on the device, holds the same figures:
benchmarks/results/h100_llama8b_run{6,7}_ledger.json)."""

from __future__ import annotations

import gzip
import json
import re
import statistics

import pytest
from stored_runs import DATA, report, rows_by_level, stored_state

from benchmarks.predictions_again import predictions_again
from tasks.decisions.vocabulary import provenance


@pytest.fixture(scope="module")
def run6():
    return rows_by_level("h100_llama8b_run6_todo.json.gz", "h100_llama8b_run6_auto_experiments.toml")


@pytest.fixture(scope="module")
def run7():
    return rows_by_level("h100_llama8b_run7_todo.json.gz", "h100_llama8b_run7_spec_experiments.toml")


def _ratio(row) -> float:
    return row.predicted_ms / row.realised.delta_ms


def test_every_row_within_the_band_no_wrong_sign_and_a_median_under_ten_percent(run6) -> None:
    """FP8 KV 0.98 / 1.21 / 1.16, W4A16 1.02 / 1.03 / 1.07, the GPU drafter 1.07 / 1.08 / 1.10 at c = 1 / 2 / 4:
    median error 7.4% over the 9 rows (run 5, the drafter's step cost assumed 0: 13.7%)."""
    assert sorted(run6) == [
        (o, c) for o in ("fp8_kv_cache", "int4_weights", "speculative_decoding_gpu") for c in (1, 2, 4)
    ]
    ratios = {key: _ratio(row) for key, row in run6.items()}
    assert all(0.8 <= ratio <= 1.25 for ratio in ratios.values()), ratios
    assert not any(row.wrong_sign for row in run6.values())
    assert statistics.median(row.error for row in run6.values()) < 0.10


def test_nothing_is_assumed_and_the_drafters_step_cost_is_the_micros(run6) -> None:
    """Every input of every row is this campaign's measurement: the drafter's step cost is the micro phase's
    ngram_gpu time at one sequence (654.7 µs), not the assumed 0; the prediction stays an upper bound on the
    gain (the rejection sampler and the host's input preparation are not timed), high at every level."""
    assert all(row.inputs == "" for row in run6.values())
    record = predictions_again(
        DATA / "h100_llama8b_run6_todo.json.gz", DATA / "h100_llama8b_run6_auto_experiments.toml"
    )[0]
    state = json.loads(gzip.decompress((DATA / "h100_llama8b_run6_todo.json.gz").read_bytes()))
    gemm = next(todo for todo in state["todos"] if todo["id"] == "gemm_bench")["result"]
    one = next(row for row in gemm["drafter_rows"] if row["sequences"] == 1)
    assert (one["min_n"], one["max_n"], one["k"]) == (2, 4, 3)
    assert (
        record.figures["spec_gpu_step_extra_ms"] == pytest.approx(one["us"] / 1000) == pytest.approx(0.6547, abs=1e-4)
    )
    where = provenance("spec_gpu_step_extra_ms", record.figures, record.assumptions, record.earlier)
    assert where == "measured: gemm_bench, in place of the assumed 0"
    for level in (1, 2, 4):
        spec = run6[("speculative_decoding_gpu", level)]
        assert spec.predicted_ms > spec.realised.delta_ms > 3.5  # TPOT 6.1 -> 2.3 ms


def test_a_second_clean_campaign_repeats_the_drafters_row(run6, run7) -> None:
    """Run 7 (MODE=spec, its own clean folder and its own micro: 684.0 µs) gives 1.06 / 1.08 / 1.10; each level's
    predicted change within 0.5% of run 6's and the realised within 2%."""
    for level in (1, 2, 4):
        six, seven = run6[("speculative_decoding_gpu", level)], run7[("speculative_decoding_gpu", level)]
        assert seven.inputs == ""
        assert 1.0 < _ratio(seven) < 1.12
        assert seven.predicted_ms == pytest.approx(six.predicted_ms, rel=0.005)
        assert seven.realised.delta_ms == pytest.approx(six.realised.delta_ms, rel=0.02)


def test_the_drafters_settings_are_settings_and_the_unused_assumptions_say_so(tmp_path) -> None:
    """spec_tokens and prompt_lookup_min/max are what the experiment applies (its --speculative-config), so the
    decision record lists them apart from the assumptions; an assumption whose figure the campaign measured says
    it was not used; the GPU drafter's gain at another spec_tokens keeps the drafter's measured step cost (timed
    at k = 3 only) instead of falling back to the assumed 0, so it lies below the CPU drafter's line (assumed 0)
    by that cost over the tokens a step yields: between 0.6547 / (k + 1) and 0.6547 ms."""
    text = report(
        stored_state("h100_llama8b_run6_todo.json.gz", tmp_path),
        "h100_llama8b_run6_auto_experiments.toml",
        tmp_path / "r",
    )
    assumptions, settings = re.search(
        r"Assumptions, stated and editable in the rules file: (.*?)\. The n-gram drafter's settings, which its experiments apply \(not assumptions\): (.*?)\. ",
        text,
    ).groups()
    assert settings == "spec_tokens = 3, prompt_lookup_min = 2, prompt_lookup_max = 4"
    assert "spec_tokens" not in assumptions and "prompt_lookup" not in assumptions
    assert "kv_fp8_overhead_us_per_layer = 2 (not used: kv_fp8_layer_delta_us_micro measured here)" in assumptions
    assert "spec_gpu_step_extra_ms = 0 (not used: spec_gpu_drafter_ms_micro measured here)" in assumptions
    assert re.search(r"spec_step_extra_ms = 0(,|$)", assumptions)  # the CPU drafter's step cost: no micro, used
    lines = re.findall(
        r"spec_tokens = 3 \(setting: the drafter's, which its experiment applies\): ([+-][\d.]+) ms at spec_tokens"
        r" = 2, ([+-][\d.]+) ms at 6(, spec_gpu_step_extra_ms held at its measurement at spec_tokens = 3)?",
        text,
    )
    assert len(lines) == 2, lines
    gpu = next(line for line in lines if line[2])
    cpu = next(line for line in lines if not line[2])
    for k, index in ((2, 0), (6, 1)):
        below = float(cpu[index]) - float(gpu[index])
        assert 0.6547 / (k + 1) - 0.002 <= below <= 0.6547 + 0.002, (k, below)


@pytest.fixture(scope="module")
def run8():
    """Run 8 (2026-12-07, a later session, another lent H100; the H200 asked for came as an H100): the same
    `auto` campaign from a clean folder, on main at ebbec9d (the config is run 6's, which the script wrote again)."""
    return rows_by_level("h100_llama8b_run8_todo.json.gz", "h100_llama8b_run6_auto_experiments.toml")


def test_a_later_clean_campaign_on_another_machine_keeps_the_median_under_ten_percent(run6, run8) -> None:
    """Run 8: W4A16 1.04 / 1.03 / 1.05 and the GPU drafter 1.04 / 1.06 / 1.07, every input measured, median
    error 5.5% over the 9 rows, no wrong sign. FP8 KV, a change of 2-3% of TPOT, came out 0.74 / 0.95 / 1.34
    (run 6: 0.98 / 1.21 / 1.16): the micro's layer (+3.85 µs as the prediction read it) matched the traced KV
    kernels (+3.65), and the findings put the rest of the c=1 miss on a GEMM kernel the FP8 variant's trace ran
    slower (`nvjet_sm90_tst_128x8_64x12_2x1_v_bz_TNT`, +0.102 ms a step), which no KV input holds."""
    assert sorted(run8) == sorted(run6)
    assert all(row.inputs == "" for row in run8.values())
    assert not any(row.wrong_sign for row in run8.values())
    assert statistics.median(row.error for row in run8.values()) < 0.10
    for key, row in run8.items():
        if key[0] != "fp8_kv_cache":
            assert 0.95 <= _ratio(row) <= 1.1, (key, _ratio(row))
            assert _ratio(row) == pytest.approx(_ratio(run6[key]), abs=0.06)  # the same row, another machine
    assert _ratio(run8[("fp8_kv_cache", 1)]) < 0.8  # the miss the findings explain, below


def test_the_fp8_miss_at_c1_is_put_on_the_kernel_outside_the_kv_path(tmp_path) -> None:
    """The findings' calibration line for run 8's FP8 experiment: the KV kernels traced against the micro's,
    and the GEMM kernel that moved, which is the part of the realised change the prediction had no input for."""
    text = report(
        stored_state("h100_llama8b_run8_todo.json.gz", tmp_path),
        "h100_llama8b_run6_auto_experiments.toml",
        tmp_path / "r",
    )
    line = next(line for line in text.splitlines() if line.startswith("- **fp8_kv_cache** `"))
    assert "a layer +3.65 traced against +4.55 in the micro, +3.85 as the prediction read it" in line
    assert "`nvjet_sm90_tst_128x8_64x12_2x1_v_bz_TNT` 2.495 → 2.597 (+0.102" in line
