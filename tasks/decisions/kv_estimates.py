"""The FP8 KV-cache option's inputs: the KV bytes a decode step reads, and what the FP8 KV cache
changes a layer, measured by the KV micro (tasks/gemm/remote/kv_bench.py) or derived from the
stated assumptions where it did not run."""

from __future__ import annotations

from tasks.decisions.figures import KeyFigures
from tasks.decisions.interpolate import linear_between
from tasks.gemm.results import KvRow, kv_pair_us


def kv_fp8_delta_assumed(out: dict[str, float | None], assumptions: dict[str, float]) -> float | None:
    """The FP8 KV cache's change to one layer's decode work, from the stated assumptions: the
    quantisation and FP8 attention overhead, less the KV bytes FP8 saves at the copy bandwidth."""
    overhead, ratio = assumptions.get("kv_fp8_overhead_us_per_layer"), assumptions.get("kv_fp8_bytes_ratio")
    read, layers = out.get("kv_read_ms"), out.get("layers")
    if overhead is None or ratio is None or read is None or not layers:
        return None
    return overhead - read * (1 - ratio) * 1000 / layers


def kv_fp8_layer_delta_us(
    figures: KeyFigures, tokens: float | None = None, context: float | None = None
) -> float | None:
    """One attention layer's decode work with the FP8 KV cache minus with the model's KV dtype (the
    KV micro's rows: the cache write and FlashAttention's paged decode; not the query's quantisation,
    which the server fuses into the kernel before attention: four FP8 variants' traces, H100 and
    H200, ran no kernel more than their base, while the micro's kernel of its own took 4.5-9.3 µs),
    at the captured step's sequences (or ``tokens``) and mean context (or ``context``): the rows at
    the nearest context timed, linear in the sequences between the counts timed, the nearest
    beyond them; None where the micro timed no pair."""
    gemm = figures.gemm
    rows = [row for row in (gemm.kv_rows if gemm else []) if row.layer_us is not None]
    if not rows:
        return None
    capture = figures.capture
    if context is None:
        context = capture.input_tokens + capture.output_tokens / 2 if capture else rows[0].context
    if tokens is None:
        tokens = (figures.rank0.decode_tokens_per_step if figures.rank0 else None) or figures.capture_concurrency
    nearest = min({row.context for row in rows}, key=lambda c: (abs(c - context), c))
    by_m: dict[int, dict[str, KvRow]] = {}
    for row in rows:
        if row.context == nearest:
            by_m.setdefault(row.m, {})[row.kv_dtype] = row
    pairs = {m: kv_pair_us(v["auto"], v["fp8"]) for m, v in by_m.items() if "fp8" in v and "auto" in v}
    points = sorted((m, fp8 - auto) for m, (auto, fp8) in pairs.items() if auto is not None and fp8 is not None)
    return linear_between(points, tokens) if points else None


def kv_read_ms(figures: KeyFigures) -> float | None:
    """ms a decode step spends reading the KV cache at the copy bandwidth: the capture's batch,
    each sequence at its mean context during decode (prompt + half the output)."""
    model, gemm, capture = figures.model, figures.gemm, figures.capture
    per_token = model.shapes.kv_bytes_per_token if model and model.shapes else None
    if not (per_token and gemm and gemm.copy_ceiling_gbps and capture):
        return None
    context = capture.input_tokens + capture.output_tokens / 2
    batch = figures.rank0.decode_tokens_per_step if figures.rank0 else capture.concurrency
    return per_token * context * (batch or 1) / (gemm.copy_ceiling_gbps * 1e6)
