"""The `[macro]` section of campaign.toml: its keys, defaults and limits."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from tasks.macro.results import MACRO_CONVERSATIONS, MACRO_RATES, MACRO_REPLAY, MACRO_SLO_SEARCH, MACRO_SWEEP
from tasks.models import ADDED_LATER, NOT_AN_INPUT, Section, input_of

LOADED = input_of(MACRO_SWEEP.id, MACRO_RATES.id, MACRO_SLO_SEARCH.id)
"""The concurrency levels' settings: every serving todo after single stream reads them."""
RATES = input_of(MACRO_RATES.id)
OPEN_LOOP = input_of(MACRO_RATES.id, MACRO_SLO_SEARCH.id)
SEARCH = input_of(MACRO_SLO_SEARCH.id)
REPLAY = input_of(MACRO_REPLAY.id)
CONVERSE = input_of(MACRO_CONVERSATIONS.id)
IN_FLIGHT = input_of(MACRO_RATES.id, MACRO_SLO_SEARCH.id, MACRO_REPLAY.id)


class MacroSection(Section):
    input_tokens: int = Field(64, ge=1, le=1 << 20)
    output_tokens: int = Field(64, ge=2, le=1 << 20)
    warmup_requests: int = Field(2, ge=0, le=10000)
    single_stream_requests: int = Field(8, ge=1, le=100000)
    concurrency_max: int = Field(
        8, ge=1, le=4096, description="the load client opens one connection a stream", json_schema_extra=LOADED
    )
    requests_per_level: int = Field(
        16,
        ge=1,
        le=1000000,
        description="requests per concurrency level (at least 2x the level)",
        json_schema_extra=LOADED,
    )
    max_failed_pct: float = Field(
        1.0, ge=0, le=100, description="more failed requests than this fails the level", json_schema_extra=NOT_AN_INPUT
    )
    repeats: int = Field(
        3, ge=1, le=100, description="runs of every level; figures pool them, their spread is the noise"
    )
    outlier_pct: float = Field(
        25.0,
        gt=0,
        le=1000,
        description="a run whose mean TPOT is further than this from"
        " the median of the runs is measured again, and flagged if it persists",
        json_schema_extra=NOT_AN_INPUT,
    )
    request_rates: list[Annotated[float, Field(gt=0, le=1e6)]] = Field(
        default_factory=list,
        description="open-loop levels, requests a second, after the concurrency sweep",
        json_schema_extra=RATES,
    )
    burstiness: float = Field(
        1.0,
        gt=0,
        le=1e6,
        description="gamma shape of the arrival gaps: 1 Poisson, < 1 burstier",
        json_schema_extra=OPEN_LOOP,
    )
    rate_max_concurrency: int = Field(
        256, ge=1, le=4096, description="requests in flight at most in a rate level", json_schema_extra=IN_FLIGHT
    )
    slo_ttft_ms: float | None = Field(
        None, gt=0, description="goodput: requests whose TTFT is at most this...", json_schema_extra=SEARCH
    )
    slo_tpot_ms: float | None = Field(None, gt=0, description="... and TPOT at most this ...", json_schema_extra=SEARCH)
    slo_e2e_ms: float | None = Field(
        None, gt=0, description="... and E2E at most this, a second of the run", json_schema_extra=SEARCH
    )
    slo_search: bool = Field(
        False, description="search the highest request rate that meets the SLOs", json_schema_extra=NOT_AN_INPUT
    )
    slo_met_pct: float = Field(
        99.0,
        gt=0,
        le=100,
        description="a rate meets the SLOs when this share of requests does",
        json_schema_extra=SEARCH,
    )
    slo_search_runs: int = Field(
        8, ge=2, le=50, description="points the search may run (one run each)", json_schema_extra=SEARCH
    )
    slo_search_start_rate: float = Field(
        1.0, gt=0, le=1e6, description="requests a second the search starts at", json_schema_extra=SEARCH
    )
    endpoint: Literal["completions", "chat"] = Field(
        "completions",
        description=("/v1/completions, or /v1/chat/completions (text prompts, the model's chat template applied)"),
    )
    dataset: Literal["random", "synthetic", "sharegpt"] = Field(
        "random",
        description=(
            "random token ids (random words with endpoint = 'chat'); synthetic: text cut to input_tokens with the"
            " model's tokenizer; sharegpt: the first turns of dataset_path's conversations (at most input_tokens),"
            " each asking for its reply's length in output tokens (at most output_tokens)"
        ),
    )
    dataset_path: str | None = Field(None, description="sharegpt: the JSON file, on the host")
    percentiles: list[Annotated[float, Field(gt=0, lt=100)]] = Field(
        default_factory=lambda: [50.0, 90.0, 99.0],
        min_length=1,
        description="percentiles of TTFT, TPOT and E2E the findings list, from the stored per-request latencies"
        " (a change needs no new run)",
        json_schema_extra=NOT_AN_INPUT,
    )

    shared_prefix_tokens: int = Field(
        0,
        ge=0,
        le=1 << 20,
        description="a system prompt of this many tokens that every request's prompt starts with (the same in"
        " every run); the rest of the prompt is the request's own. The findings give vLLM's prefix-cache hit rate"
        " of each level",
        json_schema_extra=ADDED_LATER,
    )
    trace: str | None = Field(
        None,
        description="an arrival trace replayed at its own pace after the sweep, on the controller: .csv (Azure:"
        " TIMESTAMP, ContextTokens, GeneratedTokens) or .jsonl (Mooncake: timestamp ms, input_length,"
        " output_length, hash_ids); samples in tasks/macro/samples/",
        json_schema_extra=REPLAY,
    )
    trace_speed: float = Field(1.0, gt=0, le=1000, description="2.0: arrivals twice as fast", json_schema_extra=REPLAY)
    trace_duration_s: float | None = Field(
        None,
        gt=0,
        description="replay the arrivals up to this offset (after speed); all by default",
        json_schema_extra=REPLAY,
    )

    telemetry_interval_s: float = Field(
        0.1,
        ge=0,
        le=60,
        description="sample GPU power, clocks, temperature and throttle reasons (NVML; CPU package energy from"
        " RAPL where there is no GPU) this often during every measured run, from a process of its own (0: not)",
        json_schema_extra=NOT_AN_INPUT,
    )
    conversations: int = Field(
        0,
        ge=0,
        le=100000,
        description="multi-turn conversations run after the sweep (0: none): turn n sends the whole history"
        " (the user messages and the model's own answers) and a new user message; the findings give TTFT and"
        " TPOT by turn and the prompt share the prefix cache served",
        json_schema_extra=CONVERSE,
    )
    conversation_turns: int = Field(4, ge=1, le=1000, description="turns a conversation", json_schema_extra=CONVERSE)
    conversation_concurrency: int = Field(
        2, ge=1, le=4096, description="conversations in flight at once", json_schema_extra=CONVERSE
    )
    turn_input_tokens: int = Field(
        64, ge=1, le=1 << 20, description="tokens of each new user message", json_schema_extra=CONVERSE
    )
    turn_output_tokens: int = Field(
        32, ge=2, le=1 << 20, description="tokens of each answer", json_schema_extra=CONVERSE
    )
    think_time_s: float = Field(
        0.5, ge=0, le=3600, description="between an answer and the conversation's next turn", json_schema_extra=CONVERSE
    )
    conversations_path: str | None = Field(
        None,
        description="a ShareGPT-format JSON file on the host: the human turns of its conversations with at least"
        " conversation_turns of them are the user messages (with endpoint = 'chat'); generated without it",
        json_schema_extra=CONVERSE,
    )

    @model_validator(mode="after")
    def _conversation_file_is_chat(self) -> MacroSection:
        if self.conversations_path and self.endpoint != "chat":
            raise ValueError("conversations_path sends its text turns as chat messages: set endpoint = 'chat' with it")
        return self

    @model_validator(mode="after")
    def _shared_prefix_fits(self) -> MacroSection:
        if self.shared_prefix_tokens and self.shared_prefix_tokens >= self.input_tokens:
            raise ValueError("shared_prefix_tokens is part of input_tokens: make it smaller than input_tokens")
        if self.shared_prefix_tokens and self.dataset != "random":
            raise ValueError("shared_prefix_tokens goes with random prompts (dataset = 'random')")
        return self

    @model_validator(mode="after")
    def _dataset_has_its_file(self) -> MacroSection:
        if self.dataset == "sharegpt" and not self.dataset_path:
            raise ValueError("dataset = 'sharegpt' needs dataset_path: the ShareGPT-format JSON file on the host")
        return self


def concurrency_levels(maximum: int) -> list[int]:
    """The sweep's levels: powers of two below `concurrency_max`, then it."""
    levels, level = [], 1
    while level < maximum:
        levels.append(level)
        level *= 2
    return levels + [maximum]
