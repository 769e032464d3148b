"""Cross-checks: the config's expectation, the microbenchmarks and TPOT against the traces."""

from __future__ import annotations

from orchestrator.report import md_table
from tasks.analysis.categories import Category
from tasks.analysis.collectives import counts_as_allreduce, is_allreduce_time
from tasks.decisions.figures import KeyFigures
from tasks.profile.results import CaptureManifest
from tasks.synthesis.per_layer import per_layer_section
from tasks.synthesis.reconcile import gemm_rows, step_vs_tpot_rows
from tasks.view import fmt


def crosscheck_section(figures: KeyFigures, capture: CaptureManifest | None) -> str:
    rank0 = figures.rank0
    if not rank0:
        return ""
    rows = []
    by_name = rank0.communication_by_name_per_step
    allreduce_calls = sum(v for k, v in by_name.items() if counts_as_allreduce(k))
    shapes = figures.model.shapes if figures.model else None
    expected = shapes.allreduces_per_step if shapes else None
    rows.append(
        [
            "all-reduces a decode step",
            f"config: {expected}",
            f"trace: {allreduce_calls:.1f}",
            "match"
            if expected is not None and abs(expected - allreduce_calls) < 0.01
            else "differs: see the names " + ", ".join(f"{k} x{v:.1f}" for k, v in by_name.items()),
        ]
    )
    comm = rank0.categories.get(Category.COMMUNICATION)
    allreduce = figures.allreduce
    if allreduce and allreduce.predictions and comm and comm.calls_per_step:
        first = allreduce.predictions[0]
        reduce_ops = [
            k for k in rank0.top_kernels if k.category == Category.COMMUNICATION and is_allreduce_time(k.name)
        ]
        traced_ms = sum(k.ms_per_step for k in reduce_ops) if reduce_ops else comm.ms_per_step
        traced_what = "all-reduce ops" if reduce_ops else "all communication"
        ratio = first.predicted_ms_per_step / traced_ms if traced_ms else None
        if "shm_allreduce" in allreduce.predicted_by:
            note = (
                "; the micro figure is the op with both ranks arriving together, a traced op also"
                " waits for the slower rank (see the rank imbalance), so micro/trace well below 1"
                " means ranks arrive apart"
            )
            if reduce_ops:
                note += (
                    f" (the traced typical call, p50 {fmt(max(k.p50_us_per_call for k in reduce_ops), 1)} µs,"
                    f" against micro {fmt(first.latency_us, 1)} µs)"
                )
        elif allreduce.backend == "gloo":
            # vLLM's CPU workers fall back to torch.distributed over gloo where its CPU library has
            # no shared-memory all-reduce (an AVX2 CPU): the micro's own backend, and the bench says
            # why; without that reason nothing is claimed about what the server runs.
            why = next((run.vllm_shm_unavailable for run in allreduce.runs if run.vllm_shm_unavailable), None)
            note = (
                f"; {why}: a traced call is its op and its wait for gloo's work, as the micro times it"
                if why
                else "; the micro figure is torch.distributed over gloo"
            )
        else:
            note = ""
        rows.append(
            [
                "all-reduce ms a step (1 token), means",
                f"micro ({allreduce.predicted_by}): {fmt(first.predicted_ms_per_step, 3)}",
                f"trace ({traced_what}): {fmt(traced_ms, 3)}",
                f"micro/trace = {fmt(ratio)}" + note,
            ]
        )
        if reduce_ops:
            # The typical call: p50 x calls, the figure a collective's own cost shows in.
            traced_p50_ms = sum(k.p50_us_per_call * k.calls_per_step for k in reduce_ops) / 1000
            p50_ratio = first.predicted_ms_per_step / traced_p50_ms if traced_p50_ms else None
            rows.append(
                [
                    "all-reduce ms a step (1 token), typical call",
                    f"micro p50 x {first.allreduces_per_step} calls: {fmt(first.predicted_ms_per_step, 3)}",
                    f"trace p50 x calls: {fmt(traced_p50_ms, 3)}",
                    f"micro/trace = {fmt(p50_ratio)}"
                    + (
                        ""
                        if p50_ratio is None or abs(p50_ratio - 1) <= 0.15
                        else " (outside 15%: the bench's op and the server's differ in setup or message size)"
                    ),
                ]
            )
    rows += gemm_rows(figures)
    rows += step_vs_tpot_rows(figures, capture)
    text = "## Cross-checks\n\n" + md_table(["check", "expected", "measured", "verdict"], rows)
    layers = per_layer_section(figures)
    return text + ("\n" + layers if layers else "")
