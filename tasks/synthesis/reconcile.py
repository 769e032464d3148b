"""Reconciliation: what the microbenchmarks predict for one decode step against what the trace
measured, and the trace's step against the TPOT the client measured while it was recorded."""

from __future__ import annotations

from tasks.analysis.categories import Category
from tasks.decisions.figures import KeyFigures
from tasks.decisions.gemm_prediction import predict_gemm
from tasks.profile.results import CaptureManifest
from tasks.view import fmt


def gemm_rows(figures: KeyFigures) -> list[list[str]]:
    rank0, gemm = figures.rank0, figures.gemm
    shapes = figures.model.shapes if figures.model else None
    if not (rank0 and gemm and shapes):
        return []
    rows = []
    for experts, category in ((False, Category.GEMM), (True, Category.MOE)):
        prediction = predict_gemm(shapes, gemm, rank0.decode_tokens_per_step or 1, experts)
        traced = rank0.categories.get(category)
        if prediction is None or not prediction.calls_per_step or traced is None:
            continue
        # vLLM 0.26 runs the lm_head outside the step's annotation: count it from between steps.
        between = rank0.between_steps.categories.get(category) if rank0.between_steps else None
        traced_ms = traced.ms_per_step + (between.ms_per_step if between else 0.0)
        traced_calls = traced.calls_per_step + (between.calls_per_step if between else 0.0)
        ratio = prediction.ms_per_step / traced_ms if traced_ms else None
        verdict = f"micro/trace = {fmt(ratio)}"
        cold = predict_gemm(shapes, gemm, rank0.decode_tokens_per_step or 1, experts, cold=True)
        bracket = cold is not None and any(row.op_cold_us is not None for row in gemm.rows)
        if ratio is not None and abs(ratio - 1) > 0.15 and bracket and not experts:
            verdict += (
                f" (outside 15%: on a CPU a GEMM op's time is set by where its weights are; measured in"
                f" this run, the same ops take {fmt(prediction.ms_per_step, 3)} ms a step with warm caches"
                f" and {fmt(cold.ms_per_step, 3)} ms with the caches flushed between calls: the server's"
                f" {fmt(traced_ms, 3)} ms "
                + (
                    "lies between, its weights partly evicted by the work between GEMMs (attention,"
                    " all-reduce, the other rank on the shared cache)"
                    if prediction.ms_per_step <= traced_ms <= cold.ms_per_step
                    else "lies outside even that range, so the cache state alone does not explain it"
                )
                + ")"
            )
        elif ratio is not None and abs(ratio - 1) > 0.15:
            verdict += " (outside 15%: " + (
                "the fused-MoE bench routes tokens at random; the server's routing, its kernel"
                " configuration or the experts' shared cache differ)"
                if prediction.fused
                else f"the server runs a layer's routed experts in fused kernels, {traced_calls:.0f} calls a"
                f" step; the bench timed each expert's GEMM alone, {prediction.calls_per_step:.0f} calls,"
                " each paying a launch's fixed cost, as its fused-MoE rows were not timed)"
                if experts
                else "the bench times each GEMM alone on warm, rotated weights, with the kernel named in the"
                " GEMM table; the server's kernels are in the top kernels)"
            )
        if prediction.missing:
            verdict += f"; not timed: {', '.join(prediction.missing)}"
        what = ("routed experts, fused MoE" if prediction.fused else "routed-expert GEMMs") if experts else "GEMMs"
        if any(row.op_us is not None for row in gemm.rows):
            verdict += "; micro: each op's profiled duration, as a CPU trace records it"
        rows.append(
            [
                f"{what} ms a decode step (M={prediction.m})",
                f"micro: {fmt(prediction.ms_per_step, 3)} ({prediction.calls_per_step:.0f}"
                f" {'fused-MoE layers' if prediction.fused else 'calls'})",
                f"trace ({category}{', incl. between steps' if between else ''}): {fmt(traced_ms, 3)}"
                f" ({traced_calls:.0f} calls)",
                verdict,
            ]
        )
    return rows


def step_vs_tpot_rows(figures: KeyFigures, capture: CaptureManifest | None) -> list[list[str]]:
    """The trace's wall step against the TPOT of the very requests it recorded (profiler on), and
    that TPOT against the same concurrency without the profiler: the profiler's own cost."""
    rank0 = figures.rank0
    if not rank0:
        return []
    load = capture.load if capture else None
    profiled = load.tpot_ms.mean if load and load.tpot_ms else None
    concurrency = load.concurrency if load else 1
    unprofiled = figures.tpot_by_concurrency.get(concurrency)
    rows = []
    if profiled:
        residual = profiled - rank0.wall_ms_per_step
        rows.append(
            [
                f"decode step vs TPOT (profiled requests, c={concurrency})",
                f"trace wall step: {fmt(rank0.wall_ms_per_step, 3)} ms",
                f"TPOT while profiling: {fmt(profiled, 3)} ms",
                f"residual {residual:.3f} ms ({residual / profiled * 100:.0f}% of TPOT): "
                + (
                    "time between engine steps (scheduling, API server, detokenization, streaming)"
                    if residual >= 0
                    else "steps overlap the next one's preparation (async"
                    " scheduling), so a token arrives faster than a step's annotated span"
                ),
            ]
        )
    if profiled and unprofiled:
        overhead = profiled / unprofiled
        rows.append(
            [
                f"profiler overhead (c={concurrency})",
                f"TPOT without profiler: {fmt(unprofiled, 3)} ms",
                f"with: {fmt(profiled, 3)} ms",
                f"with/without = {fmt(overhead)}"
                + (
                    ": the trace's absolute times are inflated by that much"
                    if overhead > 1.1
                    else ": below 1: the two runs (minutes apart) differ by more than the profiler costs, so its cost is"
                    " not resolved here"
                    if overhead < 0.95
                    else ""
                ),
            ]
        )
    elif profiled:
        rows.append(
            [
                f"profiler overhead (c={concurrency})",
                "not measured",
                f"with: {fmt(profiled, 3)} ms",
                f"no run without the profiler at c={concurrency}: make profile.concurrency one of the sweep's levels",
            ]
        )
    elif figures.decode_tpot_ms:
        residual = figures.decode_tpot_ms - rank0.wall_ms_per_step
        rows.append(
            [
                "decode step vs TPOT",
                f"trace wall step: {fmt(rank0.wall_ms_per_step, 3)} ms",
                f"single-stream TPOT: {fmt(figures.decode_tpot_ms, 3)} ms",
                f"residual {residual:.3f} ms ({residual / figures.decode_tpot_ms * 100:.0f}% of TPOT)",
            ]
        )
    return rows
