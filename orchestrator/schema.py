"""The persisted todo state: the campaign's single source of truth.

Each todo keeps the plain todo-list fields (`content`, `priority`, `status`) so a human can
read the file, plus what the engine needs to resume: ids, dependencies, needs, attempts,
timestamps, the last error, the result, and the inputs the result came from (the config
parts the task declared and a digest of each upstream result), so a changed config re-runs
exactly what it affects.

Schema 2 (this one) added `inputs`, `upstream` and `skipped_reason`; results are checked
against each task's result model when written and when read.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

STATE_SCHEMA_VERSION = 2


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
    attempts: int = Field(0, ge=0, description="runs that failed or are running; interruptions are not counted")
    interruptions: int = Field(0, ge=0, description="runs cut short by a controller that died")
    started_at: datetime | None = None
    finished_at: datetime | None = None
    duration_s: float | None = None
    error: TodoError | None = None
    result: dict[str, Any] | None = None
    skipped_reason: str | None = None
    inputs: dict[str, Any] | None = Field(
        None, description="the config parts this todo's result came from (secrets as digests)"
    )
    upstream: dict[str, str] = Field(
        default_factory=dict, description="digest of each dependency's result when this todo ran"
    )


class TodoState(Strict):
    """The todo file; ids are unique (a duplicate would let `reset` drop a completed result)."""

    schema_version: Literal[2] = STATE_SCHEMA_VERSION
    campaign: str
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    updated_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    todos: list[Todo]

    @field_validator("todos")
    @classmethod
    def _unique_ids(cls, todos: list[Todo]) -> list[Todo]:
        seen: set[str] = set()
        for todo in todos:
            if todo.id in seen:
                raise ValueError(f"todo id '{todo.id}' appears twice")
            seen.add(todo.id)
        return todos

    def by_id(self) -> dict[str, Todo]:
        return {todo.id: todo for todo in self.todos}


def now() -> datetime:
    return datetime.now(UTC)
