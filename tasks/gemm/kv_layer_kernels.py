"""An attention layer's decode kernels by name, read the same way from the KV micro's profile and
from a trace's top kernels: the FP8 KV-cache prediction sets the server's own model-dtype kernels
beside the micro's FP8 ones, and the experiment's calibration line names the kernel a miss is in."""

from __future__ import annotations

from collections.abc import Iterable

from tasks.analysis.results import KernelFigures
from tasks.gemm.results import KvRow

KERNELS = {
    "the cache write": ("reshape_and_cache", "concat_and_cache_mla"),
    "decode attention": ("FlashAttnFwdSm90", "_fwd_grouped_kernel_stage1"),
    "its combine": ("FlashAttnFwdCombine", "_fwd_kernel_stage2"),
}
"""An attention layer's kernels by pieces of their names, the same in a profile and in a trace: GQA's
FlashAttention, or MLA's (the latent cache write; FLASH_ATTN_MLA in bf16, TRITON_MLA's split-KV
stages with the FP8 cache, kv_mla_bench.py)."""


def named(label: str, name: str) -> bool:
    """Whether a kernel's ``name`` is one of ``label``'s (KERNELS)."""
    return any(piece in name for piece in KERNELS[label])


def traced_kernel_us(top_kernels: Iterable[KernelFigures]) -> dict[str, float]:
    """Each kernel's p50 µs a call among a rank's top decode kernels (the most-called of a name's
    matches: a layer's kernel runs once a layer, another with the same piece less often)."""
    kernels = list(top_kernels)
    out = {}
    for label in KERNELS:
        found = [k for k in kernels if named(label, k.name)]
        if found:
            out[label] = max(found, key=lambda k: k.calls_per_step).p50_us_per_call
    return out


def micro_us(row: KvRow, cold: bool) -> dict[str, float]:
    """Each kernel's profiled µs a call in the micro's row (its cold pass, or the warm rotation)."""
    kernels = (row.cold_kernels_us if cold else row.kernels_us) or {}
    out = {}
    for label in KERNELS:
        found = [us for name, us in kernels.items() if named(label, name)]
        if found:
            out[label] = sum(found)
    return out


def pairs_at(rows: list[KvRow], context: float) -> dict[int, tuple[KvRow, KvRow]]:
    """The model-dtype and FP8 rows by sequences, at the context timed nearest ``context``."""
    nearest = min({row.context for row in rows}, key=lambda c: (abs(c - context), c))
    by_m: dict[int, dict[str, KvRow]] = {}
    for row in rows:
        if row.context == nearest:
            by_m.setdefault(row.m, {})[row.kv_dtype] = row
    return {m: (v["auto"], v["fp8"]) for m, v in by_m.items() if "fp8" in v and "auto" in v}


def nearest_pair(rows: list[KvRow], tokens: float, context: float) -> tuple[KvRow, KvRow] | None:
    """The model-dtype and FP8 rows nearest ``tokens`` sequences at the context timed nearest
    ``context`` (the smaller count on a tie); None where no count has both."""
    pairs = pairs_at(rows, context) if rows else {}
    return pairs[min(pairs, key=lambda m: (abs(m - tokens), m))] if pairs else None
