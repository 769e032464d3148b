"""W4A16 on a MoE model's routed experts: what a decode step saves, measured by the GEMM micro's
`experts_fused` rows (vLLM's Triton fused_moe in the model's format against fused_marlin_moe as
W4A16, routing drawn at random) or derived from the stated ratio where the micro did not time both.

The saving is the micro's difference, not the trace's MoE time times a ratio: the micro's fused
call carries the routing kernels (top-k, align) that the trace files apart from the experts'
GEMMs, so a ratio of the micro's totals applied to the trace's experts undercounts what grows with
the step's tokens. On the H200's Qwen3-30B-A3B shape at c = 1 / 2 / 4 (realised -0.437, +0.101
and +0.991 ms: slower at one token a step, faster above), the difference predicts -0.358 / +0.080
/ +0.957 ms, the ratio predicted -0.375 / -0.007 / +0.727 (benchmarks/predictions_again.py).
"""

from __future__ import annotations

from tasks.decisions.figures import KeyFigures
from tasks.decisions.gemm_prediction import W4A16_COMPARISON
from tasks.decisions.interpolate import linear_between


def experts_us(figures: KeyFigures, tokens: float) -> tuple[float, float] | None:
    """One MoE layer's routed experts, µs, in the model's format and as W4A16 at ``tokens`` a step
    (each linear between the batches the micro timed both at); None where it did not time both."""
    if figures.gemm is None:
        return None
    by_m: dict[int, dict[str, float]] = {}
    for row in figures.gemm.rows:
        if row.name.removesuffix(W4A16_COMPARISON) == "experts_fused" and row.us:
            by_m.setdefault(row.m, {})["w4a16" if row.name.endswith(W4A16_COMPARISON) else "model"] = row.us
    both = sorted((float(m), v["model"], v["w4a16"]) for m, v in by_m.items() if len(v) == 2)
    if not both:
        return None
    return linear_between([(m, us) for m, us, _ in both], tokens), linear_between(
        [(m, us) for m, _, us in both], tokens
    )


def moe_w4a16_saving_ms(figures: KeyFigures, moe_layers: float, at_tokens: float | None = None) -> float | None:
    """What a decode step's routed experts save as W4A16 (negative: slower), ms: the micro's
    per-layer difference at the step's tokens (the capture's, or ``at_tokens``) x the MoE layers."""
    tokens = at_tokens or (figures.rank0.decode_tokens_per_step if figures.rank0 else None)
    found = experts_us(figures, tokens or figures.capture_concurrency)
    if found is None or not moe_layers:
        return None
    model, as_w4a16 = found
    return (model - as_w4a16) * moe_layers / 1000


def moe_w4a16_saving_assumed(out: dict[str, float | None], assumptions: dict[str, float]) -> float | None:
    """The same from the stated ratio: the traced MoE time x (1 - moe_w4a16_time_ratio)."""
    ratio, moe = assumptions.get("moe_w4a16_time_ratio"), out.get("moe_ms")
    return moe * (1 - ratio) if moe is not None and ratio is not None else None
