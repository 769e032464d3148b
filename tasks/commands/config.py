"""The `[commands]` section of campaign.toml: its keys, defaults and limits."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tasks.models import Section


class CommandTask(Section):
    id: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    content: str
    run: str
    depends_on: list[str] = Field(default_factory=list)
    priority: Literal["high", "medium", "low"] = "medium"
    timeout_s: float = Field(600, gt=0)
