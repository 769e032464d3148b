"""What a findings section may read (typed results of completed todos, links, number format)
and where it puts what it produces besides its text (files of the report folder, ledger records):
sections compute and format, the document's writers (tasks/findings.py) write, once, at the end."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from orchestrator.campaign import TaskSpec
from orchestrator.errors import UnitBug
from orchestrator.refs import TaskRef
from orchestrator.schema import Status, TodoState
from tasks.session import Session

ResultT = TypeVar("ResultT", bound=BaseModel)


@dataclass
class DocumentOutputs:
    """What the sections of one findings document produced besides its Markdown."""

    files: dict[str, bytes] = field(default_factory=dict)
    """Name in the report folder -> content (CSV, plots, baseline.json)."""
    ledger: list[Any] = field(default_factory=list)
    """Records for the shared `reports/ledger.json` (tasks/experiments/ledger.py), appended once."""


class Findings:
    """What a section may read: typed results of completed todos, and where the document lives.

    ``declared`` are the ids every unit may declare (enabled or not): a read of one of them that
    has no completed todo is None (its phase is off, or it failed), a read of any other id is a
    unit bug, so a renamed task cannot drop a section silently. None: unchecked (`compare`
    reads a todo file of any version)."""

    def __init__(
        self,
        session: Session,
        state: TodoState,
        folder: Path,
        specs: dict[str, TaskSpec] | None = None,
        overrides: dict[str, str | None] | None = None,
        declared: frozenset[str] | None = None,
        outputs: DocumentOutputs | None = None,
    ) -> None:
        self.session = session
        self.state = state
        self.folder = folder
        self.specs = specs or {}
        self.overrides = overrides or {}
        self.declared = declared
        self.outputs = outputs if outputs is not None else DocumentOutputs()
        self.cache: dict[str, Any] = {}
        """Figures computed once a view (tasks/decisions/figures.py: the key figures)."""
        self._todos = state.by_id()

    def seen_through(self, overrides: dict[str, str | None], session: Session | None = None) -> Findings:
        """The same results with some tasks read from others: an experiment's view, where
        `macro_single` is its `exp_<name>_macro_single` (None: it did not measure that)."""
        return Findings(
            session or self.session, self.state, self.folder, self.specs, overrides, self.declared, self.outputs
        )

    def result(self, ref: TaskRef[ResultT]) -> ResultT | None:
        """The completed result of ``ref``'s task (an experiment's view: its own version of it)."""
        if self.declared is not None and ref.id not in self.declared and ref.id not in self.specs:
            raise UnitBug(
                f"unit bug: the findings read task '{ref.id}', which no unit declares;"
                f" name it by the TaskRef in its unit's results.py"
            )
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

    def attach(self, name: str, content: bytes) -> str:
        """A file of the report folder this document writes; returns its name, for a link."""
        self.outputs.files[name] = content
        return name

    def attach_figure(self, name: str, figure: Any) -> str:
        """A matplotlib figure as ``name``.png of the report folder; the figure is closed."""
        return self.attach(f"{name}.png", figure_png(figure))

    def link(self, path: str | None, label: str = "artifact") -> str:
        if not path:
            return ""
        return f"[{label}]({os.path.relpath(path, self.folder)})"


def figure_png(figure: Any) -> bytes:
    """A matplotlib figure rendered to PNG in memory (and closed): a writer puts it on disk."""
    import io

    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=100)
    plt.close(figure)
    return buffer.getvalue()


def fmt(value: Any, digits: int = 2) -> str:
    """A figure for a table: thousands separators, fixed digits, 'n/a' when not measured."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)
