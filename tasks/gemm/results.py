"""Typed results of the `gemm` phase: each decode GEMM per rank, timed on the host."""

from __future__ import annotations

from pydantic import Field

from orchestrator.refs import TaskRef
from tasks.models import Result


class GemmInfo(Result):
    device: str
    torch: str
    device_name: str
    threads: int


class GemmRow(Result):
    """One shape in one format; timed, or skipped with the reason."""

    name: str
    m: int
    k: int
    n: int
    dtype: str
    parallel: str
    count_per_layer: float
    device: str
    rotated_copies: int
    experts: int | None = Field(None, description="set: one MoE layer's routed experts, fused")
    top_k: int | None = None
    experts_touched: float | None = Field(None, description="expected distinct experts a call reads")
    skipped: str | None = None
    kernel: str | None = None
    group_size: int | None = None
    fp8_block: int | None = None
    fp8_finer_scaling_failed: list[str] | None = None
    relative_error_vs_bf16_reference: float | None = None
    timing: str | None = None
    graph_error: str | None = None
    us: float | None = None
    threads: int | None = Field(None, description="CPU threads of this row where not the bench's (a rank at TP/2)")
    samples: int | None = Field(None, description="timings the median `us` is taken over")
    spread_pct: float | None = Field(None, description="(max - min) / median of those timings, %")
    remeasured_from_us: float | None = Field(
        None,
        description="set: the first timing was out of line with the neighbouring batch sizes and was measured again",
    )
    flag: str | None = Field(None, description="still out of line after the second measurement")
    op: str | None = Field(None, description="CPU: the op a profiler trace records for this GEMM")
    op_us: float | None = Field(None, description="CPU: the op's own duration as a profiler trace records it (p50)")
    op_cold_us: float | None = Field(None, description="CPU: the same with the caches flushed between calls")
    tflops: float | None = None
    gbps: float | None = None
    bytes_moved: int | None = None
    pct_of_copy_ceiling: float | None = None
    eager_us: float | None = None
    do_bench_us: float | None = None
    do_bench_cudagraph_us: float | None = None


class KvRow(Result):
    """One attention layer's decode work at ``m`` sequences of ``context`` tokens with the KV cache
    in ``kv_dtype`` ('auto': the model's, 'fp8'); timed, or skipped with the reason."""

    m: int
    context: int
    kv_dtype: str
    skipped: str | None = None
    write_us: float | None = Field(None, description="reshape_and_cache_flash of the step's new K and V")
    attention_us: float | None = Field(None, description="paged decode attention")
    query_quant_us: float | None = Field(
        None, description="FP8: the query's quantisation as a kernel of its own (not counted: the server fuses it)"
    )
    us: float | None = Field(None, description="the layer's sum: what the option changes a layer a step")
    kernel: str | None = None
    timing: str | None = None
    rotated_copies: int | None = None
    block_size: int | None = None
    note: str | None = Field(None, description="where the micro could not call a kernel as the server does")
    kernels_us: dict[str, float] | None = Field(
        None,
        description="each kernel's profiled µs a call (write and attention), to set beside the trace's kernels:"
        " the graph-replay figures hold the gaps between kernels too",
    )
    cold_write_us: float | None = Field(
        None,
        description="the write's kernels, profiled, with the L2 evicted ahead of each layer (as the server's step)",
    )
    cold_attention_us: float | None = Field(None, description="the attention's kernels, the same way")
    cold_kernels_us: dict[str, float] | None = Field(None, description="each kernel's µs a call in that pass")

    @property
    def cold(self) -> bool:
        """Whether the row's parts are the cold pass's: the server's layer finds its cache and scales
        evicted from the L2 by the rest of the step; the warm rotation could hold a short context's
        caches inside it (rows stored before 2026-12-05 have no cold pass)."""
        return self.cold_write_us is not None and self.cold_attention_us is not None

    @property
    def layer_us(self) -> float | None:
        """The cache write and the attention: what the server's step runs, from the cold pass where
        the row has one. Rows stored before 2026-12-05 counted the query's quantisation in ``us``
        too; the server's traces show no such kernel (torch.compile fuses it into the kernel before
        attention), so it is left out here."""
        if self.cold:
            return self.cold_write_us + self.cold_attention_us  # type: ignore[operator]
        return warm_layer_us(self)


def kv_pair_us(auto: KvRow, fp8: KvRow) -> tuple[float | None, float | None]:
    """The layer's µs with the model's KV dtype and with FP8, both from the cold pass where both rows
    have one, else both from the warm rotation: a change between a cold and a warm figure would
    hold the L2's effect instead of the option's."""
    if auto.cold and fp8.cold:
        return auto.layer_us, fp8.layer_us
    return warm_layer_us(auto), warm_layer_us(fp8)


def warm_layer_us(row: KvRow) -> float | None:
    if row.write_us is not None and row.attention_us is not None:
        return row.write_us + row.attention_us
    return row.us


class DrafterRow(Result):
    """vLLM's GPU n-gram drafter a decode step at ``sequences`` sequences (ngram_gpu_bench.py)."""

    sequences: int
    min_n: int = Field(description="the drafter's shortest match (prompt_lookup_min)")
    max_n: int = Field(description="its longest (prompt_lookup_max)")
    k: int = Field(description="draft tokens a step (num_speculative_tokens)")
    us: float | None = Field(None, description="the drafter's suffix search a step, its launches included")
    skipped: str | None = None


class GemmResult(Result):
    info: GemmInfo
    copy_ceiling_gbps: float = Field(description="a large device-to-device copy, read + write")
    rows: list[GemmRow]
    artifact: str
    kv_rows: list[KvRow] = Field(
        default_factory=list, description="the FP8 KV-cache micro (kv_bench.py): auto and fp8 at each point"
    )
    kv_not_measured: str | None = Field(None, description="why the FP8 KV-cache micro has no rows")
    drafter_rows: list[DrafterRow] = Field(
        default_factory=list, description="the GPU n-gram drafter (ngram_gpu_bench.py) at each level's sequences"
    )
    drafter_not_measured: str | None = Field(None, description="why the GPU drafter micro has no rows")

    def drafter_ms(self, sequences: float, settings: tuple[int, int, int]) -> float | None:
        """The GPU drafter's ms a step at ``sequences`` with ``settings`` (min_n, max_n, k): the nearest
        point timed at or above, else the largest (its time is flat in the batch); None where no row
        was timed with those settings."""
        timed = sorted(
            (row.sequences, row.us)
            for row in self.drafter_rows
            if row.us is not None and (row.min_n, row.max_n, row.k) == settings
        )
        if not timed:
            return None
        return next((us for n, us in timed if n >= sequences), timed[-1][1]) / 1000


GEMM_BENCH = TaskRef("gemm_bench", GemmResult)
