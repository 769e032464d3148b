"""The `service` unit's refs and result models, and the typed facts of its two needs."""

from __future__ import annotations

from pydantic import Field

from orchestrator.refs import NeedRef, TaskRef
from tasks.models import Result


class LoadSummary(Result):
    """What vLLM's start-up log said (tasks/service/vllm_log.py)."""

    phase: str
    shard_percent: int | None = None
    shards_done: int | None = None
    shards_total: int | None = None
    eta_s: float | None = None
    weights_load_s: float | None = None
    model_load_s: float | None = None
    model_memory_gib: float | None = None
    graph_capture_percent: int | None = None
    graph_capture_s: float | None = None
    engine_init_s: float | None = None
    kv_cache_tokens: int | None = None
    quantization: str | None = None
    enforce_eager: bool | None = None
    cudagraph_mode: str | None = None
    attention_backend: str | None = None
    linear_kernels: list[str] = Field(default_factory=list)
    moe_method: str | None = None
    startup_complete: bool = False
    fatal_line: str | None = None
    logged_exception: str | None = None  # the first exception vLLM logged at ERROR level (a fatal line's cause)
    lines_seen: int = 0
    phases_seen: list[str] = Field(default_factory=list)


class ServiceReady(Result):
    adopted: bool
    pid: int | None
    model: str = Field(description="the served model name")
    ready_s: float | None = None
    load: LoadSummary | None = None
    launched_at_epoch_s: float | None = None
    log: str | None = None
    health_to_task_done_s: float | None = Field(
        None, description="from /health turning 200 to this task's end: readiness latency"
    )


class ServiceFacts(ServiceReady):
    """What ensuring the `service` need reports: the readiness figures, and when /health first
    answered (the task turns it into a latency)."""

    health_seen_monotonic: float | None = None


class AcceleratorsFree(Result):
    """What ensuring `accelerators_free` reports: the census after the stop, per node."""

    stopped_pid: int | None = None
    port_closed: bool
    leftover_pids: list[int]
    gpu_compute_apps: list[str]
    gpu_memory_in_use: list[str]
    nodes: list[dict[str, object]] = Field(default_factory=list)


SERVICE_READY = TaskRef("service_ready", ServiceReady)


SERVICE = NeedRef("service")
"""The need of a task that talks to the campaign's server: it is up and answers."""
ACCELERATORS_FREE = NeedRef("accelerators_free")
"""The need of a microbenchmark: no server of ours holds the GPUs (or the cores)."""
