"""The base models of everything a user or a task writes down: a `campaign.toml` section and a
task's stored result, both refusing unknown keys. Imports nothing of ours, so any module may
use them without reaching the units (the typed config, tasks/config_types.py, needs that)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A `campaign.toml` section: unknown keys are errors."""

    # strict: TOML has types, and a value of the wrong one is a mistake, not something to coerce
    # (`concurrency_max = true` read as 1 ran only c=1; "8" for a number, 1.5 for a count).
    model_config = ConfigDict(extra="forbid", strict=True)


class Result(BaseModel):
    """A task's typed result, as stored in the todo file: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")
