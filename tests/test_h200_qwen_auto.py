"""Issue 31's must-show on the H200: the Qwen3-30B-A3B shape (bf16, dummy weights, TP 1, vLLM 0.26) with
`auto` (FP8 KV and W4A16 listed; auto added the GPU n-gram drafter) from a clean work folder, no ledger,
at c = 1, 2 and 4 (`SHAPE=qwen3moe_bf16 GPU_MEM=0.6 benchmarks/gpu_experiments.sh start /tmp/work`,
2026-12-07; tests/data/h200_qwen3moe_run3_todo.json.gz as the H200 left it). Real GPU measurements,
re-read on CPU by benchmarks/predictions_again.py: every prediction made before its experiment ran.
Runs 1 and 2 on the same H200 (tests/test_h200_predictions.py) came out at a 41% median error with
W4A16's sign wrong; this run, with the inputs measured, at 8.9% over 9 rows."""

from __future__ import annotations

import statistics

import pytest
from stored_runs import rows_by_level


@pytest.fixture(scope="module")
def rows():
    return rows_by_level("h200_qwen3moe_run3_todo.json.gz", "h200_qwen3moe_auto_experiments.toml")


def test_every_row_within_the_band_no_wrong_sign_median_under_ten_percent(rows) -> None:
    """FP8 KV 0.83 / 0.91 / 1.02, W4A16 0.88 / 1.25 / 1.01, the GPU drafter 1.19 / 1.08 / 1.04 at
    c = 1 / 2 / 4: each within 0.8-1.25 (W4A16 at c=2 on the edge, +0.055 against +0.044 ms, a change
    inside the runs' noise)."""
    assert sorted(rows) == [(option, level) for option in sorted({o for o, _ in rows}) for level in (1, 2, 4)]
    assert {option for option, _ in rows} == {"fp8_kv_cache", "int4_weights", "speculative_decoding_gpu"}
    ratios = {key: row.predicted_ms / row.realised.delta_ms for key, row in rows.items()}
    assert all(0.8 <= ratio <= 1.25 for ratio in ratios.values()), ratios
    assert not any(row.wrong_sign for row in rows.values())
    assert statistics.median(abs(ratio - 1) for ratio in ratios.values()) <= 0.10


def test_w4a16_on_the_moe_right_in_sign_at_every_level(rows) -> None:
    """The sign that came out wrong in runs 1 and 2 (+0.175 predicted against -0.430 realised at c=1): now
    a saving at c=1 and a cost at c=4, as realised, from the GEMM micro's Marlin-MoE rows."""
    c1, c4 = rows[("int4_weights", 1)], rows[("int4_weights", 4)]
    assert c1.predicted_ms < 0 and c1.realised.delta_ms < 0
    assert c4.predicted_ms > 0 and c4.realised.delta_ms > 0
    assert c1.inputs == "" and c4.inputs == ""  # nothing assumed


def test_the_drafters_step_cost_is_the_one_input_left_assumed(rows) -> None:
    """The GPU drafter's step cost is assumed 0 from a clean folder (no earlier record on this H200), so the
    prediction is an upper bound on the change: high at every level, most at c=1 (1.19)."""
    for level in (1, 2, 4):
        row = rows[("speculative_decoding_gpu", level)]
        assert row.inputs.startswith("spec_gpu_step_extra_ms assumed")
        assert row.predicted_ms > row.realised.delta_ms > 0
