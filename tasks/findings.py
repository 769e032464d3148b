"""The findings document under `reports/<campaign>/`, assembled from the units' sections.

Order: the summary and setup (cross-phase), each enabled unit's section in campaign order, then
the cross-phase sections (cross-checks, bottleneck, decision record, baseline, the config the
results came from), the task table and the human notes (kept verbatim). Every section reads
typed results through ``Findings.result``.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from orchestrator.atomic import write_atomic
from orchestrator.campaign import TaskSpec
from orchestrator.report import (
    HUMAN_NOTES_HEADING,
    existing_human_notes,
    render_html,
    task_table,
    timing_summary,
)
from orchestrator.schema import Status, TodoState
from tasks.session import Session
from tasks.unit import PhaseUnit

ResultT = TypeVar("ResultT", bound=BaseModel)


class Findings:
    """What a section may read: typed results of completed todos, and where the document lives."""

    def __init__(self, session: Session, state: TodoState, folder: Path,
                 specs: dict[str, TaskSpec] | None = None) -> None:
        self.session = session
        self.state = state
        self.folder = folder
        self.specs = specs or {}
        self._todos = state.by_id()

    def result(self, task_id: str, model: type[ResultT]) -> ResultT | None:
        todo = self._todos.get(task_id)
        if todo is None or todo.status != Status.completed or todo.result is None:
            return None
        return model.model_validate(todo.result)

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


def write_findings(session: Session, state: TodoState, units: list[PhaseUnit],
                   specs: dict[str, TaskSpec]) -> list[Path]:
    from tasks.synthesis import closing_sections, opening_sections

    folder = session.reports_dir / state.campaign
    folder.mkdir(parents=True, exist_ok=True)
    document_path = folder / "findings.md"
    notes = existing_human_notes(document_path)
    findings = Findings(session, state, folder, specs)
    sections = [f"# Findings: campaign `{state.campaign}`\n"]
    sections += opening_sections(findings)
    sections += [unit.section(findings) for unit in units if unit.section is not None]
    sections += closing_sections(findings)
    sections.append("## Tasks\n\n" + task_table(state) + "\n" + timing_summary(state))
    sections.append(f"{HUMAN_NOTES_HEADING}\n\n{notes}")
    text = "\n".join(section for section in sections if section)
    write_atomic(document_path, text.encode())
    write_atomic(folder / "findings.html", render_html(text).encode())
    return [document_path]
