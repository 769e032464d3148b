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

    @property
    def layer_us(self) -> float | None:
        """The cache write and the attention: what the server's step runs. Rows stored before
        2026-12-05 counted the query's quantisation in ``us`` too; the server's traces show no such
        kernel (torch.compile fuses it into the kernel before attention), so it is left out here."""
        if self.write_us is not None and self.attention_us is not None:
            return self.write_us + self.attention_us
        return self.us


class GemmResult(Result):
    info: GemmInfo
    copy_ceiling_gbps: float = Field(description="a large device-to-device copy, read + write")
    rows: list[GemmRow]
    artifact: str
    kv_rows: list[KvRow] = Field(
        default_factory=list, description="the FP8 KV-cache micro (kv_bench.py): auto and fp8 at each point"
    )
    kv_not_measured: str | None = Field(None, description="why the FP8 KV-cache micro has no rows")


GEMM_BENCH = TaskRef("gemm_bench", GemmResult)
