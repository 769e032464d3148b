"""The `[profile]` section of campaign.toml: its keys, defaults and limits."""

from __future__ import annotations

from pydantic import Field

from tasks.models import NOT_AN_INPUT, Section


class ProfileSection(Section):
    warmup_requests: int = Field(2, ge=0, le=1000)
    requests: int = Field(4, ge=1, le=1000)
    concurrency: int = Field(
        1,
        ge=1,
        le=4096,
        description=(
            "requests in flight while the profiler records; the decode step's batch (GEMM M). Set it to a"
            " level of macro.concurrency_levels to have the profiler's overhead measured at it"
        ),
    )
    output_tokens: int = Field(32, ge=2, le=1 << 20)
    stop_timeout_s: float = Field(3600, gt=0, json_schema_extra=NOT_AN_INPUT)
