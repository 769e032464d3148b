"""Three campaigns made after the FP8 KV rule (the model-dtype side from the base trace, the FP8 side
from the KV micro's cold pass) was fixed on Qwen3-MoE run 3: the Qwen3-30B-A3B shape (bf16, dummy
weights, TP 1, vLLM 0.26) on lent H100 80GBs, each from a clean work folder, no ledger, at c = 1, 2 and 4
(`SHAPE=qwen3moe_bf16 CONC_MAX=4 GPU_MEM=0.92 benchmarks/gpu_experiments.sh`, 2026-12-06: run 4 MODE=all,
the GPU n-gram drafter then W4A16 then FP8 KV; run 5 MODE=measured, W4A16 then FP8 KV; run 6 (another
machine, GPU_MEM=0.9) no MODE: `auto` with FP8 KV and W4A16 listed, auto adding the GPU drafter;
tests/data/h100_qwen3moe_run{4,5,6}_todo.json.gz as the H100s left them). Real GPU measurements re-read
on CPU by benchmarks/predictions_again.py: out of sample for every option."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
sys.path.insert(0, str(ROOT))

from benchmarks.predictions_again import predictions_again  # noqa: E402

RUNS = {
    "h100_qwen3moe_run4_todo.json.gz": "h100_qwen3moe_all_experiments.toml",
    "h100_qwen3moe_run5_todo.json.gz": "h100_qwen3moe_measured_experiments.toml",
    "h100_qwen3moe_run6_todo.json.gz": "h100_qwen3moe_auto_experiments.toml",
}


def _ratio(row) -> float:
    return row.predicted_ms / row.realised.delta_ms


@pytest.fixture(scope="module", params=sorted(RUNS))
def rows(request):
    record, rows = predictions_again(DATA / request.param, DATA / RUNS[request.param])
    assert record.concurrency == 1
    return {(row.experiment, row.concurrency): row for row in rows}


def test_the_median_error_over_every_level_under_ten_percent_and_no_wrong_sign(rows) -> None:
    """Run 4: 8.0% over 9 rows; run 5: 5.7% over 6; run 6: 3.6% over 9. W4A16 and FP8 KV have no input
    left assumed; the drafter's step cost is assumed 0 from a clean folder (an upper bound), and still
    1.17 / 0.93 / 0.92 (run 4) and 1.30 / 1.01 / 0.98 (run 6)."""
    assert not any(row.wrong_sign for row in rows.values())
    errors = [abs(_ratio(row) - 1) for row in rows.values()]
    assert statistics.median(errors) <= 0.10
    for (option, _), row in rows.items():
        if option in ("int4_weights", "fp8_kv_cache"):
            assert row.inputs == "", row.inputs
        else:
            assert row.inputs.startswith("spec_gpu_step_extra_ms assumed")


def test_fp8_kv_within_the_band_at_c1_inside_the_noise_at_c4_and_high_at_c2(rows) -> None:
    """FP8 KV: 1.07 / 1.20 / 0.86, 1.04 / 1.38 / 0.93 and 0.96 / 1.42 / 0.74. Every run realised less at
    c=2 (-0.125 to -0.150 ms) than at c=1 and c=4 (-0.17 to -0.21), which no kernel's change a layer
    predicts; left as a miss (run 3 in-sample gave 0.98 / 0.98 / 1.03). At c=4 the realised interval is
    0.17 ms wide and the prediction inside it every time (run 6's 0.74 included)."""
    ratios = {level: _ratio(rows[("fp8_kv_cache", level)]) for level in (1, 2, 4)}
    assert 0.95 <= ratios[1] <= 1.1 and 0.7 <= ratios[4] <= 1.0
    c4 = rows[("fp8_kv_cache", 4)]
    assert c4.realised.low_ms <= c4.predicted_ms <= c4.realised.high_ms
    assert 1.15 <= ratios[2] <= 1.45


def test_w4a16_right_at_two_and_four_sequences_and_its_c1_miss_is_tiny_in_ms(rows) -> None:
    """W4A16 at c=2 and 4 within 3% (0.97-1.01). At c=1 the realised change is +0.008 / +0.013 / +0.009 ms
    (0.2% of TPOT) against +0.096 / +0.132 / +0.119 predicted: a ratio of 10-13 with the right sign, the
    miss 0.09-0.12 ms."""
    for level in (2, 4):
        assert 0.95 <= _ratio(rows[("int4_weights", level)]) <= 1.05
    c1 = rows[("int4_weights", 1)]
    assert 0 < c1.realised.delta_ms < 0.02 < c1.predicted_ms < 0.15
    # beside the step, the miss is 1.9-2.6% of the base's TPOT (4.65 ms)
    assert 0.015 < c1.error_of_tpot < 0.03
    assert c1.error_of_tpot == (c1.predicted_ms - c1.realised.delta_ms) / c1.realised.base_ms


def test_the_w4a16_line_names_the_idle_before_machete(tmp_path: Path) -> None:
    """Where the c=1 miss went: W4A16 saved 0.157 ms of device work a step, and the device's idle before
    each Machete GEMM (4.11 µs, 96 a step; none among the base's eight longest waits, which run cuBLAS)
    took 0.394 ms; the line names it first and the Marlin-MoE memsets second. FP8 KV's line names no
    idle move: its two lists differ only by kernels crossing the eight's cut-off (0.021 ms each)."""
    from tests.test_h200_predictions import _calibration_lines

    lines = _calibration_lines(tmp_path, "h100_qwen3moe_run4_todo.json.gz", RUNS["h100_qwen3moe_run4_todo.json.gz"])
    idle = lines["int4_weights"].split("the device's idle before a kernel that moved most, ms a step: ")[1]
    first, second = idle.split("; ")[:2]
    assert first == "`void cutlass::device_kernel` under 0.021 → 0.394 (96 gaps of 4.11 µs)"
    assert second == "`Memset (Device)` under 0.021 → 0.129 (97 gaps of 1.33 µs)"
    assert "idle before a kernel" not in lines["fp8_kv_cache"]


def test_run6_with_run4s_record_takes_the_drafter_step_cost_from_it_and_lands_in_the_band() -> None:
    """Run 6 re-read with run 4's ledger (the same H100 model, shape and vLLM, another machine): the
    drafter's step cost, assumed 0 from a clean folder, comes from run 4's experiment and is named as an
    earlier record; c=1 goes from 1.30 to 1.10 and nothing else moves (every other input is run 6's own)."""
    todo, config = "h100_qwen3moe_run6_todo.json.gz", RUNS["h100_qwen3moe_run6_todo.json.gz"]
    clean = {(row.experiment, row.concurrency): row for row in predictions_again(DATA / todo, DATA / config)[1]}
    ledger = ROOT / "benchmarks" / "results" / "h100_qwen3moe_run4_ledger.json"
    again = {(r.experiment, r.concurrency): r for r in predictions_again(DATA / todo, DATA / config, ledger)[1]}
    spec = again[("speculative_decoding_gpu", 1)]
    assert spec.inputs.startswith("spec_gpu_step_extra_ms earlier record: h100-qwen3moe-experiments-all/")
    assert _ratio(clean[("speculative_decoding_gpu", 1)]) > 1.25 >= _ratio(spec) >= 0.8
    for key, row in again.items():
        if key[0] != "speculative_decoding_gpu":
            assert row.predicted_ms == clean[key].predicted_ms and row.inputs == ""
