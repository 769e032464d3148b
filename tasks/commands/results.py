"""The `commands` unit's result model: what every user command todo stores."""

from __future__ import annotations

from tasks.models import Result


class CommandOutput(Result):
    exit_code: int
    artifact: str
    output_head: str
