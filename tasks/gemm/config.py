"""The `[gemm]` section of campaign.toml: its keys, defaults and limits."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from tasks.models import Section


class GemmSection(Section):
    batch_sizes: list[Annotated[int, Field(ge=1, le=65536)]] = Field(default_factory=lambda: [1, 8, 32], min_length=1)
    repeats: int = Field(20, ge=3, le=10000)
    int4_group_size: Literal[32, 64, 128, 256] = 128
    compare_w4a16: bool = Field(True, description="also time W4A16 for bf16 layers: what quantizing would buy")
