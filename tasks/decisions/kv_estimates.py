"""The FP8 KV-cache option's inputs: the KV bytes a decode step reads, and what the FP8 KV cache
changes a layer, measured by the KV micro (tasks/gemm/remote/kv_bench.py) or derived from the
stated assumptions where it did not run."""

from __future__ import annotations

from tasks.decisions.figures import KeyFigures
from tasks.decisions.interpolate import linear_between
from tasks.gemm.kv_layer_kernels import micro_us, nearest_pair, pairs_at, traced_kernel_us
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
    beyond them; None where the micro timed no pair. Where the cold pass ran, the model-dtype side
    is the server's own (`kv_trace_minus_micro_us` taken out of each cold pair's change)."""
    rows = _timed(figures)
    if not rows:
        return None
    capture = figures.capture
    if context is None:
        context = capture.input_tokens + capture.output_tokens / 2 if capture else rows[0].context
    if tokens is None:
        tokens = _traced_tokens(figures)
    excess = kv_trace_minus_micro_us(figures) or 0.0
    points = []
    for m, (auto, fp8) in sorted(pairs_at(rows, context).items()):
        auto_us, fp8_us = kv_pair_us(auto, fp8)
        if auto_us is not None and fp8_us is not None:
            points.append((m, fp8_us - auto_us - (excess if auto.cold and fp8.cold else 0.0)))
    return linear_between(points, tokens) if points else None


def kv_trace_minus_micro_us(figures: KeyFigures) -> float | None:
    """What the server's own model-dtype kernels of a layer (the base capture's trace: rank 0's
    decode steps, the p50 of the cache write, the decode attention and its combine) take beyond the
    micro's cold pass of the same kernels, at the traced step's sequences and mean context (µs a
    layer; None without a trace holding them or a cold pass). The server measured that side before
    any experiment; the micro is needed only for FP8's. Why: on the H100 the cold pass gave the
    server's FP8 write and attention within 0.2-0.3 µs (Qwen3-MoE 4.45/10.86 against 4.29/10.88,
    Llama-8B 4.50/10.71 against 4.35/10.40) and its bf16 attention 1.1 µs under (8.65 against 9.73,
    8.82 against 9.63) with the very kernel and launch shape: the micro's change then read 1.35-1.38x
    the traces' (benchmarks/results/h100_qwen3moe_run3_2026-12-05.md)."""
    rank, capture = figures.rank0, figures.capture
    rows = _timed(figures)
    traced = traced_kernel_us(rank.top_kernels) if rank else {}
    if not rows or not traced:
        return None
    context = capture.input_tokens + capture.output_tokens / 2 if capture else rows[0].context
    auto, _ = nearest_pair(rows, _traced_tokens(figures), context) or (None, None)
    micro = micro_us(auto, cold=True) if auto is not None and auto.cold else {}
    shared = [label for label in traced if label in micro]
    return sum(traced[label] - micro[label] for label in shared) if shared else None


def _timed(figures: KeyFigures) -> list[KvRow]:
    gemm = figures.gemm
    return [row for row in (gemm.kv_rows if gemm else []) if row.layer_us is not None]


def _traced_tokens(figures: KeyFigures) -> float:
    return (figures.rank0.decode_tokens_per_step if figures.rank0 else None) or figures.capture_concurrency


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
