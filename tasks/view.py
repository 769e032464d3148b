"""What a findings section may read: typed results of completed todos, links, number format."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from orchestrator.campaign import TaskSpec
from orchestrator.errors import UnitBug
from orchestrator.refs import TaskRef
from orchestrator.schema import Status, TodoState
from tasks.session import Session

ResultT = TypeVar("ResultT", bound=BaseModel)


class Findings:
    """What a section may read: typed results of completed todos, and where the document lives.

    ``declared`` are the ids every unit may declare (enabled or not): a read of one of them that
    has no completed todo is None (its phase is off, or it failed), a read of any other id is a
    unit bug, so a renamed task cannot drop a section silently. None: unchecked (`compare`
    reads a todo file of any version)."""

    def __init__(self, session: Session, state: TodoState, folder: Path,
                 specs: dict[str, TaskSpec] | None = None, overrides: dict[str, str | None] | None = None,
                 declared: frozenset[str] | None = None) -> None:
        self.session = session
        self.state = state
        self.folder = folder
        self.specs = specs or {}
        self.overrides = overrides or {}
        self.declared = declared
        self._todos = state.by_id()

    def seen_through(self, overrides: dict[str, str | None], session: Session | None = None) -> Findings:
        """The same results with some tasks read from others: an experiment's view, where
        `macro_single` is its `exp_<name>_macro_single` (None: it did not measure that)."""
        return Findings(session or self.session, self.state, self.folder, self.specs, overrides, self.declared)

    def result(self, ref: TaskRef[ResultT]) -> ResultT | None:
        """The completed result of ``ref``'s task (an experiment's view: its own version of it)."""
        if self.declared is not None and ref.id not in self.declared and ref.id not in self.specs:
            raise UnitBug(f"unit bug: the findings read task '{ref.id}', which no unit declares;"
                          f" name it by the TaskRef in its unit's results.py")
        if ref.model is None:
            raise UnitBug(f"unit bug: the findings read '{ref.id}' through an untyped TaskRef")
        task_id = ref.id
        if task_id in self.overrides:
            task_id = self.overrides[task_id]
            if task_id is None:
                return None
        todo = self._todos.get(task_id)
        if todo is None or todo.status != Status.completed or todo.result is None:
            return None
        return ref.model.model_validate(todo.result)

    def link(self, path: str | None, label: str = "artifact") -> str:
        if not path:
            return ""
        return f"[{label}]({os.path.relpath(path, self.folder)})"


def fmt(value: Any, digits: int = 2) -> str:
    """A figure for a table: thousands separators, fixed digits, 'n/a' when not measured."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)
