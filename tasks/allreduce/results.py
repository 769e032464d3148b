"""Typed results of the `allreduce` phase: all-reduce latency across the TP ranks, and the
decode-step prediction made from it."""

from __future__ import annotations

from pydantic import Field

from orchestrator.refs import TaskRef
from tasks.models import Result


class AllreduceRow(Result):
    bytes: int
    latency_us: float
    algbw_gbps: float
    busbw_gbps: float = Field(description="algbw x 2(n-1)/n, as nccl-tests")
    per_rank_latency_us: list[float] = Field(default_factory=list)
    repeats: int | None = Field(None, description="timed loops the median latency is taken over")
    spread_pct: float | None = Field(None, description="(max - min) / median of the slowest rank's loops, %")


class AllreduceRun(Result):
    """One launch of the bench: the default, or a forced NCCL variant (which may fail)."""

    env: dict[str, str]
    error: str | None = None
    backend: str | None = None
    world_size: int | None = None
    dtype: str | None = None
    iterations: int | None = None
    repeats: int | None = None
    nccl_algo: str | None = None
    nccl_proto: str | None = None
    collective_env: dict[str, str] = Field(
        default_factory=dict,
        description=("NCCL_*, TORCH_SYMM_MEM_*, NVSHMEM_* and CUDA_VISIBLE_DEVICES as the ranks saw them"),
    )
    torch: str | None = None
    rows: list[AllreduceRow] = Field(default_factory=list)
    graph_rows: list[AllreduceRow] | None = Field(
        None, description=("CUDA: the same all-reduces captured in a CUDA graph and replayed, as vLLM runs decode")
    )
    graph_unavailable: str | None = None
    vllm_shm_rows: list[AllreduceRow] | None = None
    vllm_shm_unavailable: str | None = None
    nodes: int = Field(1, description="hosts the ranks were spread over")


class Prediction(Result):
    decode_tokens: int
    bytes: int
    latency_us: float
    allreduces_per_step: int
    predicted_ms_per_step: float


class AllreduceResult(Result):
    backend: str
    world_size: int
    model_sizes_bytes: list[int]
    runs: list[AllreduceRun]
    predictions: list[Prediction]
    predicted_by: str
    allreduces_per_step_source: str
    artifact: str
    nodes: int = Field(1, description="hosts the server's ranks (and these runs' ranks) span")
    intra_node: AllreduceRun | None = Field(
        None,
        description=("multi-node: the same all-reduce with every rank on the head, beside the runs across the nodes"),
    )


ALLREDUCE_BENCH = TaskRef("allreduce_bench", AllreduceResult)
