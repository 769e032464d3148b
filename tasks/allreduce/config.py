"""The `[allreduce]` section of campaign.toml: its keys, defaults and limits."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from tasks.models import Section


class AllreduceSection(Section):
    decode_tokens: list[Annotated[int, Field(ge=1, le=65536)]] = Field(default_factory=lambda: [1, 8, 32], min_length=1)
    sweep_min_bytes: int = Field(1024, ge=4, le=1 << 34)
    sweep_max_bytes: int = Field(4 << 20, ge=4, le=1 << 34)
    iterations: int = Field(50, ge=3, le=100000)
    nccl_variants: bool = True

    @model_validator(mode="after")
    def _sweep_in_order(self) -> AllreduceSection:
        if self.sweep_min_bytes > self.sweep_max_bytes:
            raise ValueError("sweep_min_bytes is above sweep_max_bytes; swap them")
        return self
