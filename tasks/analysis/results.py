"""Typed results of the `analysis` phase: the decode-step breakdown per rank."""

from __future__ import annotations

from pydantic import Field

from orchestrator.refs import TaskRef
from tasks.models import Result


class CategoryFigures(Result):
    calls_per_step: float
    mean_us_per_call: float | None = Field(description="None when the category had no calls")
    p50_us_per_call: float | None
    ms_per_step: float
    share_pct: float
    ms_per_step_ci95: float | None = Field(None, description="95% interval half-width of the mean over steps")


class KernelFigures(Result):
    name: str
    category: str
    ms_per_step: float
    calls_per_step: float
    mean_us_per_call: float
    p50_us_per_call: float


class BetweenFigures(Result):
    calls_per_step: float
    ms_per_step: float


class BetweenSteps(Result):
    """Device work after a decode step's annotation and before the next step (vLLM 0.26 computes
    the logits and samples there): not in the step's figures, reported beside them."""

    device_ms_per_step: float
    categories: dict[str, BetweenFigures]
    top_names: list[str]


class IdleKernel(Result):
    name: str
    category: str
    ms_per_step: float
    gaps_per_step: float
    mean_us_per_gap: float


class IdleBefore(Result):
    """Device idle time inside the steps, charged to the kernel the device then waited for (GPU
    traces): under CUDA graphs, the part of a step's time that no kernel's duration holds."""

    idle_ms_per_step: float
    categories: dict[str, float] = Field(description="category of the kernel waited for -> idle ms a step")
    top_kernels: list[IdleKernel]


class OtherSteps(Result):
    """Prefill or mixed (prefill + decode batched) steps, broken down like decode steps."""

    steps: int
    prefill_tokens_per_step: float
    device_ms_per_step: float
    busy_union_ms_per_step: float
    wall_ms_per_step: float
    categories: dict[str, CategoryFigures]
    top_kernels: list[KernelFigures]


class GemmSequence(Result):
    """A decode step's GEMM kernels in launch order (steps with the usual count of GEMMs)."""

    steps: int
    names: list[str]
    positions: list[tuple[int, float]] = Field(description="(index into names, mean µs) a position")


class Uncovered(Result):
    """A kernel family no rule matches, above the guard's share of device time."""

    family: str
    share_pct: float
    names: int = Field(description="distinct kernel names in the family")
    example: str


class RankBreakdown(Result):
    """The decode-step figures at the top level; prefill and mixed steps in ``other_steps``."""

    rank: int
    kind: str = Field(description="'gpu' (device events) or 'cpu' (CPU ops)")
    decode_steps: int = Field(
        description="steps in the top-level figures: decode steps unless steps_kind says otherwise"
    )
    steps_kind: str = Field(
        "decode",
        description="what the top-level steps are: decode; prefill or mixed"
        " when there are no decode steps; 'step' when the marker does not say",
    )
    step_marker: str = Field("vllm", description="the annotations that marked the steps (--step-marker)")
    note: str | None = Field(None, description="set when the steps are not the usual decode steps, and why")
    attributed_by: str = Field(
        "start",
        description="'start': a kernel is in the step whose window holds its"
        " start; 'launch': the step whose CPU range holds its launch (CPU-only marks)",
    )
    backward_share_pct: float = Field(
        0.0, description="device time in backward/optimizer kernels: above 5% the trace is a training trace"
    )
    uncategorised: list[Uncovered] = Field(default_factory=list, description="families in 'other' above 2%")
    warnings: list[str] = Field(
        default_factory=list,
        description="what makes the figures less than the trace holds: events left out (a negative or absurd"
        " duration), a GPU trace without kernel events, another step marker that would have matched",
    )
    dropped_events: int = Field(0, description="events left out for a negative, non-finite or absurd duration")
    device_outside_steps_pct: float | None = Field(
        None, description="device (or CPU-op) time outside every step window, % of the trace's"
    )
    world_size: int | None = Field(None, description="the trace's distributedInfo.world_size")
    trace_id: str | None = Field(None, description="the profiler session's id (Kineto's trace_id)")
    decode_tokens_per_step: float = Field(0.0, description="sequences decoded a step: the GEMMs' M")
    prefill_steps: int
    mixed_steps: int = 0
    device_ms_per_step: float
    busy_union_ms_per_step: float
    wall_ms_per_step: float
    device_ms_per_step_ci95: float | None = None
    wall_ms_per_step_ci95: float | None = None
    categories: dict[str, CategoryFigures] = Field(
        description="every category of the rules file, in its order, then 'other'"
    )
    communication_calls_per_step: dict[int, int] = Field(description="calls in a step -> steps")
    communication_by_name_per_step: dict[str, float]
    top_kernels: list[KernelFigures]
    unmatched_names: list[str]
    other_steps: dict[str, OtherSteps] = Field(default_factory=dict, description="'prefill', 'mixed'")
    between_steps: BetweenSteps | None = None
    idle_before: IdleBefore | None = None
    gemm_sequence: GemmSequence | None = None
    trace: str

    @property
    def training(self) -> bool:
        from tasks.analysis.coverage import BACKWARD_PCT

        return self.backward_share_pct > BACKWARD_PCT

    def dominant_category(self) -> str | None:
        busy = {name: c.share_pct for name, c in self.categories.items() if c.calls_per_step}
        return max(busy, key=busy.__getitem__) if busy else None


class Imbalance(Result):
    device_ms_per_step_min: float
    device_ms_per_step_max: float
    max_over_min: float | None
    communication_share_pct_by_rank: list[float]


class Breakdown(Result):
    ranks: list[RankBreakdown]
    imbalance: Imbalance
    artifact: str
    nodes: dict[str, str] = Field(default_factory=dict, description="multi-node: rank -> the node it ran on")
    warnings: list[str] = Field(default_factory=list, description="inputs that do not look like one run's ranks")

    def ranks_by_node(self) -> dict[str, list[int]]:
        grouped: dict[str, list[int]] = {}
        for rank, node in sorted(self.nodes.items(), key=lambda item: int(item[0])):
            grouped.setdefault(node, []).append(int(rank))
        return grouped


ANALYSIS_BREAKDOWN = TaskRef("analysis_breakdown", Breakdown)
