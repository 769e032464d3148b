"""The Qwen3-30B-A3B shape (MoE, bf16, dummy weights, TP 1, vLLM 0.26) with the GPU n-gram drafter's experiment
alone, from a clean work folder, no ledger, at c = 1, 2 and 4: the first MoE campaign whose micro phase timed the
drafter before the experiment — on a lent H100 80GB (2026-12-07: the H200 asked for was not lent). Run 7:
`MODE=spec SHAPE=qwen3moe_bf16 GPU_MEM=0.9 benchmarks/gpu_experiments.sh start /tmp/work`. Real GPU measurements,
re-read on CPU by benchmarks/predictions_again.py (the ledger.json written on the device holds the same figures:
benchmarks/results/h100_qwen3moe_run7_ledger.json).

What it shows: every input measured, the prediction an upper bound on the gain at every level (the micro times
the drafter, not the rest of the speculative step), 1.44 / 1.15 / 1.07; the miss at c = 1 is the step cost the
micro times only a part of (1.626 of the 3.363 ms the experiment measured), and the findings say so."""

from __future__ import annotations

import gzip
import json
import re

import pytest
from stored_runs import DATA, report, rows_by_level, stored_state

from benchmarks.predictions_again import predictions_again

TODO, CONFIG = "h100_qwen3moe_run7_todo.json.gz", "h100_qwen3moe_run7_spec_experiments.toml"


@pytest.fixture(scope="module")
def rows():
    return rows_by_level(TODO, CONFIG)


def test_an_upper_bound_at_every_level_with_every_input_measured(rows) -> None:
    assert sorted(rows) == [("speculative_decoding_gpu", c) for c in (1, 2, 4)]
    for row in rows.values():
        assert row.inputs == ""  # nothing assumed
        assert not row.wrong_sign
        assert row.predicted_ms > row.realised.delta_ms > 1.0  # TPOT 4.6 -> 3.4 ms at c=1
    ratios = [
        rows[("speculative_decoding_gpu", c)].predicted_ms / rows[("speculative_decoding_gpu", c)].realised.delta_ms
        for c in (1, 2, 4)
    ]
    assert ratios == pytest.approx([1.44, 1.15, 1.07], abs=0.01)


def test_the_drafters_cost_is_the_micros_and_the_miss_is_put_down_to_it(tmp_path) -> None:
    """The prediction read the micro's ngram_gpu time at one sequence (1.626 ms: this host launches slower than
    run 6's, whose standalone timing gave 0.69); the experiment measured the whole step's extra at 3.363 ms; with
    that one value in its place the formula gives the realised change within 1%, and the findings name it."""
    record = predictions_again(DATA / TODO, DATA / CONFIG)[0]
    state = json.loads(gzip.decompress((DATA / TODO).read_bytes()))
    gemm = next(todo for todo in state["todos"] if todo["id"] == "gemm_bench")["result"]
    one = next(row for row in gemm["drafter_rows"] if row["sequences"] == 1)
    assert record.figures["spec_gpu_step_extra_ms"] == pytest.approx(one["us"] / 1000) == pytest.approx(1.626, abs=1e-3)
    text = report(stored_state(TODO, tmp_path), CONFIG, tmp_path / "r")
    line = re.search(
        r"spec_gpu_step_extra_ms = ([\d.]+) \(the prediction read 1\.626\).*?realised ([+-][\d.]+) ms; the input"
        r" responsible for the miss: spec_gpu_step_extra_ms \(with the experiment's value alone, the prediction would"
        r" have been ([+-][\d.]+) ms\)",
        text,
    )
    assert line, text
    assert float(line[1]) == pytest.approx(3.363, abs=1e-3)
    assert float(line[3]) == pytest.approx(float(line[2]), rel=0.01)
