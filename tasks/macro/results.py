"""Typed results of the `macro` phase: what users feel, client and server views."""

from __future__ import annotations

from pydantic import Field

from orchestrator.refs import TaskRef
from tasks.macro.energy import Telemetry
from tasks.models import Result


class Distribution(Result):
    """Milliseconds; empty (count 0) when nothing was measured."""

    count: int
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None


class Stalls(Result):
    threshold_ms: float
    count: int
    requests_affected: int
    total_ms: float
    max_ms: float


class ServerMetric(Result):
    server_mean_ms: float
    server_count: int
    client_minus_server_pct: float | None = None


class Scheduling(Result):
    client_sid: int
    autogroup_enabled: bool | None = None
    server_sid: int | None = None


class Spread(Result):
    """The runs' values of one figure: median, min-max, spread % of the median, verdict."""

    runs: int
    median: float | None = None
    low: float | None = None
    high: float | None = None
    spread_pct: float | None = None
    verdict: str = Field(description="stable (<= 5%), noisy (<= 20%), unstable, or why there is none")


class RepeatRun(Result):
    """One run of a level: its means and where its requests are."""

    seed: int
    completed: int
    failed: int
    duration_s: float
    tpot_ms_mean: float | None
    ttft_ms_mean: float | None
    output_throughput_tok_per_s: float | None
    artifact: str
    achieved_request_rate: float | None = None


class Noise(Result):
    runs: list[RepeatRun] = Field(description="the runs kept, pooled into the level's figures")
    discarded: list[RepeatRun] = Field(default_factory=list, description="outliers a re-run did not confirm")
    tpot_ms_mean: Spread
    ttft_ms_mean: Spread
    output_throughput_tok_per_s: Spread
    notes: list[str] = Field(default_factory=list, description="outliers re-measured; 'flagged:' when one persisted")

    @property
    def flagged(self) -> bool:
        return any(note.startswith("flagged") for note in self.notes)


class SpecDecode(Result):
    """Speculative decoding over a level, from vLLM's /metrics counters (tasks/macro/metrics.py)."""

    drafts: int
    draft_tokens: int
    accepted_tokens: int
    mean_acceptance_length: float = Field(description="1 + accepted / drafts: tokens a verify step yields")
    draft_acceptance_rate: float | None = Field(None, description="accepted / draft tokens")
    acceptance_by_position: list[float] = Field(
        default_factory=list, description=("per draft position, the share of drafts whose token there was accepted")
    )


class LevelSummary(Result):
    concurrency: int
    requests: int
    completed: int
    failed: int
    failure_examples: list[str]
    duration_s: float
    request_throughput_per_s: float | None
    output_throughput_tok_per_s: float | None
    output_tokens: int
    ttft_ms: Distribution
    tpot_ms: Distribution
    itl_ms: Distribution
    e2e_ms: Distribution
    stalls: Stalls
    scheduling: Scheduling | None = None
    server: dict[str, ServerMetric] = Field(description="per metric key (ttft_ms, ...): /metrics delta")
    artifact: str
    noise: Noise | None = Field(None, description="the level's repeats; the figures above pool their requests")
    request_rate: float | None = Field(None, description="open loop: the rate asked, requests a second")
    burstiness: float | None = None
    achieved_request_rate: float | None = Field(
        None, description="(sent - 1) / (last send - first send), each run, the runs' median"
    )
    prompt_tokens_mean: float | None = Field(
        None,
        description="prompt tokens a request as the server counted"
        " them (usage.prompt_tokens; a chat template adds some)",
    )
    prefix_cache_hit_pct: float | None = Field(
        None,
        description=(
            "prompt tokens served from the prefix cache, % of those looked up (/metrics); prompts carry"
            " unique prefixes, so above 0 means the server reused something it should not have"
        ),
    )
    spec_decode: SpecDecode | None = Field(
        None, description="speculative decoding counters, when the server speculates"
    )
    telemetry: Telemetry | None = Field(
        None, description="power, clocks and throttling over the level's runs (None: not sampled)"
    )
    latencies: list[tuple[float, float | None, float]] | None = Field(
        None, description="(TTFT, TPOT, E2E) ms of each completed request: goodput under any SLO, at report time"
    )


class MacroRates(Result):
    levels: list[LevelSummary]
    input_tokens: int
    output_tokens: int


class MacroReplay(Result):
    """A trace's arrivals replayed at their own pace (`[macro] trace`), beside the trace's figures."""

    level: LevelSummary
    trace: str
    format: str = Field(description="azure (CSV) or mooncake (JSONL)")
    arrivals: int
    span_s: float = Field(description="first to last arrival, after trace_speed")
    speed: float
    trace_rate_per_s: float | None = Field(description="the trace's arrival rate: (arrivals - 1) / span")
    achieved_rate_per_s: float | None = Field(description="the rate the requests were sent at, measured")
    lateness_ms: Distribution = Field(description="each send's lateness against its scheduled time")
    shared_block_pct: float | None = Field(
        None, description="Mooncake: prefix blocks an earlier request already had, % (a prefix cache's best case)"
    )


class TurnFigures(Result):
    """One turn number of the conversations: its requests' latencies and prefix-cache share."""

    turn: int
    requests: int
    completed: int
    prompt_tokens_mean: float | None = Field(description="prompt tokens a request (usage.prompt_tokens)")
    cached_pct: float | None = Field(
        description="prompt tokens the server served from its prefix cache, % of the turn's prompt tokens"
        " (each response's usage.prompt_tokens_details.cached_tokens); None where the server does not say"
    )
    ttft_ms: Distribution
    tpot_ms: Distribution


class MacroConversations(Result):
    """Multi-turn conversations (`[macro] conversations`): each turn sends the whole history."""

    level: LevelSummary = Field(description="every turn's request pooled; its prefix-cache hit rate from /metrics")
    source: str = Field(description="'generated' or the ShareGPT file the user messages came from")
    conversations: int
    finished: int = Field(description="conversations whose every turn completed")
    turns: int
    concurrency: int = Field(description="conversations in flight")
    think_time_s: float
    conversations_per_s: float | None = Field(description="finished conversations over the run's duration")
    by_turn: list[TurnFigures]


class RequestTokens(Result):
    """One request's token ids, as the server returned them."""

    prompt: list[int]
    output: list[int]


class MacroSingle(Result):
    single_stream: LevelSummary
    input_tokens: int
    output_tokens: int
    token_ids: list[RequestTokens] | None = Field(
        None,
        description="the prompt and output token ids of the first requests (vLLM's return_token_ids), over which"
        " the n-gram drafter is replayed; None where the server did not return them",
    )


class MacroSweep(Result):
    levels: list[LevelSummary]
    input_tokens: int
    output_tokens: int


class SearchPoint(Result):
    rate: float
    meets: bool
    met_pct: float
    level: LevelSummary


class SloSearch(Result):
    """The SLO search's points in the order run; best_rate: the highest that met the SLOs."""

    points: list[SearchPoint]
    best_rate: float | None
    next_missing_rate: float | None = Field(description="the lowest rate above best_rate that missed")
    slo_met_pct: float
    slo_ttft_ms: float | None
    slo_tpot_ms: float | None
    slo_e2e_ms: float | None


MACRO_SINGLE = TaskRef("macro_single", MacroSingle)
MACRO_SWEEP = TaskRef("macro_sweep", MacroSweep)
MACRO_RATES = TaskRef("macro_rates", MacroRates)
MACRO_REPLAY = TaskRef("macro_replay", MacroReplay)
MACRO_CONVERSATIONS = TaskRef("macro_conversations", MacroConversations)
MACRO_SLO_SEARCH = TaskRef("macro_slo_search", SloSearch)
