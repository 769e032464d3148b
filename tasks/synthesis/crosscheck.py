"""Cross-checks: the config's expectation, the microbenchmarks and TPOT against the traces."""

from __future__ import annotations

from orchestrator.report import md_table
from tasks.synthesis.figures import KeyFigures
from tasks.view import fmt


def crosscheck_section(figures: KeyFigures) -> str:
    rank0 = figures.rank0
    if not rank0:
        return ""
    rows = []
    by_name = rank0.communication_by_name_per_step
    allreduce_calls = sum(v for k, v in by_name.items() if "gather" not in k.lower())
    shapes = figures.model.shapes if figures.model else None
    expected = shapes.allreduces_per_step if shapes else None
    rows.append(["all-reduces a decode step", f"config: {expected}", f"trace: {allreduce_calls:.1f}",
                 "match" if expected is not None and abs(expected - allreduce_calls) < 0.01 else
                 "differs: see the names " + ", ".join(f"{k} x{v:.1f}" for k, v in by_name.items())])
    comm = rank0.categories.get("communication")
    allreduce = figures.allreduce
    if allreduce and allreduce.predictions and comm and comm.calls_per_step:
        first = allreduce.predictions[0]
        reduce_ops = [k for k in rank0.top_kernels
                      if k.category == "communication" and "gather" not in k.name.lower()]
        traced_ms = sum(k.ms_per_step for k in reduce_ops) if reduce_ops else comm.ms_per_step
        traced_what = "all-reduce ops" if reduce_ops else "all communication"
        ratio = first.predicted_ms_per_step / traced_ms if traced_ms else None
        if "shm_allreduce" in allreduce.predicted_by:
            note = ("; the micro figure is the op with both ranks arriving together, a traced op also"
                    " waits for the slower rank (see the rank imbalance), so micro/trace well below 1"
                    " means ranks arrive apart")
            if reduce_ops:
                note += (f" (the traced typical call, p50 {fmt(max(k.p50_us_per_call for k in reduce_ops), 1)} µs,"
                         f" against micro {fmt(first.latency_us, 1)} µs)")
        elif allreduce.backend == "gloo":
            note = ("; the server does not use gloo (vLLM CPU uses its own shared-memory all-reduce,"
                    " not available on this host), so the micro figure bounds a gloo-based setup only")
        else:
            note = ""
        rows.append(["all-reduce ms a step (1 token)",
                     f"micro ({allreduce.predicted_by}): {fmt(first.predicted_ms_per_step, 3)}",
                     f"trace ({traced_what}): {fmt(traced_ms, 3)}", f"micro/trace = {fmt(ratio)}" + note])
    tpot = figures.decode_tpot_ms
    if tpot:
        residual = tpot - rank0.wall_ms_per_step
        rows.append(["decode step vs TPOT", f"trace wall step: {fmt(rank0.wall_ms_per_step, 3)} ms",
                     f"single-stream TPOT: {fmt(tpot, 3)} ms",
                     f"residual {residual:.3f} ms ({residual / tpot * 100:.0f}% of TPOT): scheduling,"
                     " API server, detokenization and streaming outside the engine step"])
    return "## Cross-checks\n\n" + md_table(["check", "expected", "measured", "verdict"], rows)
