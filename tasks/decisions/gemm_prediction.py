"""Micro-predicted GEMM time a decode step: the GEMM microbenchmark's rows at the step's M,
times the calls a step of each of the model's GEMMs. The cross-checks hold it against the trace;
the decision figures read it for what a change of format (W4A16) or of M (speculative decoding)
would cost."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tasks.gemm.results import GemmResult, GemmRow
from tasks.model.shapes import ModelShapes

W4A16_COMPARISON = " (as W4A16)"
HALF_TP = " (at TP/2)"  # tasks/gemm/action.py names the rows so
WHAT_IF = (W4A16_COMPARISON, HALF_TP)
"""Name suffixes of the micro's rows that time something the server does not run today."""


def variant_of(name: str) -> str:
    """The what-if suffix of a micro row's name ('' for what the server runs)."""
    return next((suffix for suffix in WHAT_IF if name.endswith(suffix)), "")


def micro_us(row: GemmRow, cold: bool = False) -> float:
    """The figure to hold against a trace: on CPU the op's own profiled duration (what a CPU
    trace records as the GEMM; ``cold``: with the caches flushed between calls), else the
    kernel's time."""
    if cold and row.op_cold_us is not None:
        return row.op_cold_us
    return row.op_us if row.op_us is not None else row.us or 0.0


@dataclass
class GemmPrediction:
    m: int
    ms_per_step: float
    calls_per_step: float
    missing: list[str]
    fused: bool = False
    """True: routed experts predicted from the fused-MoE rows (one call a MoE layer)."""


def _predict(shapes: ModelShapes, timed: dict[tuple[str, int], float], m: int, kinds: set[str]) -> GemmPrediction:
    total_us = calls = 0.0
    missing = []
    for layer in shapes.layers:
        if layer.kind not in kinds:
            continue
        rows_m = m if layer.tokens_share == 1.0 else max(1, math.ceil(m * layer.tokens_share))
        count = 1.0 if layer.name == "lm_head" else layer.count_per_layer * shapes.num_layers
        us = timed.get((layer.name, rows_m))
        if us is None:
            missing.append(layer.name)
            continue
        total_us += us * count
        calls += count
    return GemmPrediction(
        m=m, ms_per_step=total_us / 1000, calls_per_step=calls, missing=missing, fused=kinds == {"fused_experts"}
    )


def predict_gemm(
    shapes: ModelShapes,
    gemm: GemmResult,
    decode_tokens: float,
    experts: bool,
    cold: bool = False,
    as_w4a16: bool = False,
    variant: str = "",
) -> GemmPrediction | None:
    """Σ over the model's GEMMs (routed experts, or the rest) of µs at the step's M x calls a
    step, in the format the model runs (``as_w4a16``: from the what-if W4A16 rows instead;
    ``variant``: from the rows of that what-if suffix, e.g. HALF_TP); None when no M was timed.
    Routed experts come from the fused-MoE rows where those were timed (what the server runs),
    else from each expert's GEMM alone."""
    wanted_variant = W4A16_COMPARISON if as_w4a16 else variant
    timed = {
        (row.name.removesuffix(wanted_variant), row.m): micro_us(row, cold)
        for row in gemm.rows
        if row.us is not None and variant_of(row.name) == wanted_variant
    }
    measured_m = batch_sizes(shapes, timed)
    if not measured_m:
        return None
    wanted = max(1, round(decode_tokens))
    m = min(measured_m, key=lambda value: (abs(value - wanted), value))
    if not experts:
        return _predict(shapes, timed, m, {"dense"})
    fused = _predict(shapes, timed, m, {"fused_experts"})
    return fused if fused.calls_per_step and not fused.missing else _predict(shapes, timed, m, {"expert"})


def batch_sizes(shapes: ModelShapes, timed: dict[tuple[str, int], float]) -> list[int]:
    """The step sizes (M) the micro timed: a row's M is the step's for every GEMM that sees all of
    its tokens, not for one routed expert's alone (ceil(M x top_k / E): M=32 of 128 experts, top-8
    times that expert at M=2, which is no step size the micro timed)."""
    share = {layer.name: layer.tokens_share for layer in shapes.layers}
    return sorted({m for name, m in timed if share.get(name, 1.0) == 1.0})


def timed_batch_sizes(shapes: ModelShapes, gemm: GemmResult) -> list[int]:
    """The step sizes the micro timed (rows of what the server runs)."""
    timed = {(row.name, row.m): row.us or 0.0 for row in gemm.rows if row.us is not None and not variant_of(row.name)}
    return batch_sizes(shapes, timed)


def predict_gemm_as_w4a16(shapes: ModelShapes, gemm: GemmResult, decode_tokens: float) -> GemmPrediction | None:
    """The dense GEMMs of a step from the what-if W4A16 rows (None when none were timed)."""
    return predict_gemm(shapes, gemm, decode_tokens, experts=False, as_w4a16=True)
