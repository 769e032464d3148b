"""Predictions at every concurrency the campaign serves, not only the capture's.

The trace is taken at one level (the capture's); the other levels have their own measured TPOT
and the micros' rows at their own M. A level's figures are the capture's with:
- TPOT and its spread: that level's, measured;
- the micro figures (GEMMs at M, the verify step's GEMMs at M x (k+1), the TP/2 and W4A16 rows,
  the all-reduce at the level's message size): recomputed at the level's tokens a step;
- the traced figures a step's batch changes: scaled from the capture's level by the micro's own
  ratio between the two batches (GEMM and MoE time by the GEMM micro, the all-reduce time by the
  all-reduce micro, the KV read and the attention by the tokens a step, since each sequence
  reads its own KV), and named as scaled;
- the rest of the trace (a rank's waiting, the traced all-reduce's p50, the step's wall and
  device work): not known at another level, so an option that reads them is not predicted there.
"""

from __future__ import annotations

from tasks.decisions.estimates import (
    allreduce_figures,
    gemm_figures,
    gemm_ms_at,
    gpu_drafter_ms,
    rule_figures,
    with_measured_in_place,
)
from tasks.decisions.figures import KeyFigures
from tasks.decisions.interpolate import linear_between
from tasks.decisions.kv_estimates import kv_fp8_layer_delta_us
from tasks.decisions.moe_estimates import moe_w4a16_saving_ms
from tasks.decisions.vocabulary import MEASURED_IN_PLACE

NOT_AT_OTHER_LEVELS = (
    "comm_typical_ms",
    "comm_wait_ms",
    "comm_wait_min_rank_ms",
    "ar_trace_p50_us",
    "step_wall_ms",
    "device_ms",
    "idle_ms",
)
"""Traced figures no micro can carry to another batch: options reading them are predicted at the
capture's level only."""


def capture_tokens(figures: KeyFigures) -> float:
    return (figures.rank0.decode_tokens_per_step if figures.rank0 else None) or float(figures.capture_concurrency)


def _ratio(now: float | None, then: float | None) -> float | None:
    return now / then if now is not None and then else None


def level_figures(
    figures: KeyFigures, assumptions: dict[str, float], concurrency: int
) -> tuple[dict[str, float | None], list[str]]:
    """The rules' vocabulary at ``concurrency``, and the traced figures scaled to it."""
    values = rule_figures(figures, assumptions)
    if concurrency == figures.capture_concurrency:
        return values, []
    out = dict(values)
    then, now = capture_tokens(figures), float(concurrency)
    out["tpot_ms"] = figures.tpot_by_concurrency.get(concurrency)
    capture_tpot = values.get("tpot_ms")
    out["tpot_growth_ms"] = out["tpot_ms"] - capture_tpot if out["tpot_ms"] is not None and capture_tpot else None
    out["tpot_spread_pct"] = figures.tpot_spread_pct(concurrency)
    for name in NOT_AT_OTHER_LEVELS:
        out[name] = None
    scaled: list[str] = []
    shapes = figures.model.shapes if figures.model else None
    gemm = figures.gemm
    # the micros at the level's own tokens a step
    out.update(gemm_figures(figures, assumptions, now))
    out.update(allreduce_figures(figures, now))
    out["moe_w4a16_saving_ms_micro"] = moe_w4a16_saving_ms(figures, out.get("moe_layers") or 0.0, now)
    dense = moe = None
    if shapes and gemm:
        dense = _ratio(gemm_ms_at(shapes, gemm, now), gemm_ms_at(shapes, gemm, then))
        moe = _ratio(gemm_ms_at(shapes, gemm, now, experts=True), gemm_ms_at(shapes, gemm, then, experts=True))
    # the traced figures a step's batch changes, scaled by the micros' own ratio
    for name, factor in (
        ("gemm_ms", dense),
        ("moe_ms", moe),
        ("comm_ms", _comm_ratio(figures, then, now)),
        ("attention_ms", now / then),
        ("kv_read_ms", now / then),
    ):
        if out.get(name):
            out[name] = out[name] * factor if factor is not None else None  # type: ignore[operator]
            scaled.append(name)
    sweep_context = figures.sweep.input_tokens + figures.sweep.output_tokens / 2 if figures.sweep else None
    out["kv_fp8_layer_delta_us_micro"] = kv_fp8_layer_delta_us(figures, now, sweep_context)
    out["spec_gpu_drafter_ms_micro"] = gpu_drafter_ms(figures, assumptions, concurrency)
    for assumed in MEASURED_IN_PLACE:
        if assumed in assumptions:  # the capture's measurement does not stand at this level
            out[assumed] = assumptions[assumed]
    return with_measured_in_place(out, assumptions), scaled


def _comm_ratio(figures: KeyFigures, then: float, now: float) -> float | None:
    """The all-reduce micro's predicted latency at the level's tokens a step over the capture's,
    linear between the token counts it predicted for (its rows in between are single sizes, one
    noisy row would swing the ratio: a 74 µs row between 2.6 and 2.8 was seen on this CPU)."""
    allreduce = figures.allreduce
    points = sorted({(p.decode_tokens, p.latency_us) for p in allreduce.predictions}) if allreduce else []
    if not points:
        return None
    return _ratio(linear_between(points, now), linear_between(points, then))
