"""The FP8 KV-cache experiment's input, kernel by kernel: what the KV micro timed of each kernel of an
attention layer (the cache write, FlashAttention's decode and its combine) against the same kernel
in the base's and the variant's traces, so a prediction that misses names the kernel it missed in.

On the H100's Llama-8B shape the prediction came out at 0.28-0.55 of the realised change; this line
showed the micro's FP8 write at 1.87 → 2.48 µs where the traces' went 2.14 → 4.35, and its decode
attention 7.14 → 7.00 where the traces' went 9.63 → 10.40.
"""

from __future__ import annotations

from tasks.analysis.results import ANALYSIS_BREAKDOWN, Breakdown
from tasks.gemm.kv_layer_kernels import KERNELS, micro_us, nearest_pair, traced_kernel_us
from tasks.gemm.results import GEMM_BENCH
from tasks.view import Findings


def traced_us(analysis: Breakdown | None) -> dict[str, float]:
    """Each kernel's p50 µs a call in rank 0's decode steps (its top kernels)."""
    return traced_kernel_us(analysis.ranks[0].top_kernels) if analysis and analysis.ranks else {}


def kv_kernel_note(findings: Findings, variant: Findings) -> str | None:
    """One line: each kernel, µs a call with the model's KV dtype → with FP8, in the traces and in
    the KV micro (the pass the prediction read), and the change a layer each adds up to; with the
    cold pass, also as the prediction read it: the base trace's own kernels against the micro's FP8
    (`kv_trace_minus_micro_us`; at the capture's level, the line's)."""
    analysis = findings.result(ANALYSIS_BREAKDOWN)
    base, fp8 = traced_us(analysis), traced_us(variant.result(ANALYSIS_BREAKDOWN))
    tokens = (analysis.ranks[0].decode_tokens_per_step if analysis and analysis.ranks else None) or 1.0
    config = findings.session.config if findings.session else None
    context = config.macro.input_tokens + config.profile.output_tokens / 2 if config else 0.0
    gemm = findings.result(GEMM_BENCH)
    rows = [row for row in (gemm.kv_rows if gemm else []) if row.skipped is None and row.kernels_us]
    pair = nearest_pair(rows, tokens, context)
    if pair is None or not base or not fp8:
        return None
    auto_row, fp8_row = pair
    cold = auto_row.cold and fp8_row.cold
    micro_auto, micro_fp8 = micro_us(auto_row, cold), micro_us(fp8_row, cold)
    parts = []
    traced_total = micro_total = read_total = 0.0
    for label in KERNELS:
        if label not in base or label not in fp8:
            continue
        text = f"{label} {base[label]:.2f} → {fp8[label]:.2f} ({fp8[label] - base[label]:+.2f})"
        traced_total += fp8[label] - base[label]
        if label in micro_auto and label in micro_fp8:
            change = micro_fp8[label] - micro_auto[label]
            text += f", micro {micro_auto[label]:.2f} → {micro_fp8[label]:.2f} ({change:+.2f})"
            micro_total += change
            read_total += micro_fp8[label] - (base[label] if cold else micro_auto[label])
        parts.append(text)
    if not parts:
        return None
    which = "its cold pass, the L2 evicted ahead of each layer" if cold else "its rotation, the L2 holding what fits"
    return (
        f"kernel by kernel, µs a call, the model's KV dtype → FP8, the traces' p50 against the KV micro's"
        f" profile ({which}; {auto_row.m} sequence(s), {auto_row.context} tokens): "
        + "; ".join(parts)
        + f"; a layer {traced_total:+.2f} traced against {micro_total:+.2f} in the micro"
        + (
            f", {read_total:+.2f} as the prediction read it (the base trace's kernels, the micro's FP8 ones)"
            if cold
            else ""
        )
    )
