"""The persisted todo state: the campaign's single source of truth.

Each todo keeps the plain todo-list fields (`content`, `priority`, `status`) so a human can
read the file, plus what the engine needs to resume: ids, dependencies, needs, attempts,
timestamps, the last error and the result.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

STATE_SCHEMA_VERSION = 1


class Status(StrEnum):
    pending = "pending"
    in_progress = "in_progress"
    completed = "completed"
    failed = "failed"
    skipped = "skipped"


class Priority(StrEnum):
    high = "high"
    medium = "medium"
    low = "low"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TodoError(Strict):
    message: str
    kind: str = Field(description="exception class that ended the attempt")
    output_tail: str = Field("", description="last lines of the relevant output or log")


class Todo(Strict):
    id: str
    content: str
    priority: Priority = Priority.medium
    status: Status = Status.pending
    kind: str = Field(description="which task implementation runs it, e.g. 'command'")
    depends_on: list[str] = Field(default_factory=list)
    needs: list[str] = Field(
        default_factory=list,
        description="resources that must hold while it runs, e.g. 'service' or 'accelerators_free'",
    )
    attempts: int = 0
    started_at: datetime | None = None
    finished_at: datetime | None = None
    duration_s: float | None = None
    error: TodoError | None = None
    result: dict[str, Any] | None = None


class TodoState(Strict):
    schema_version: Literal[1] = STATE_SCHEMA_VERSION
    campaign: str
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    updated_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    todos: list[Todo]

    def by_id(self) -> dict[str, Todo]:
        return {todo.id: todo for todo in self.todos}


def now() -> datetime:
    return datetime.now(UTC)
