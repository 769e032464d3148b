"""The findings document under `reports/<campaign>/`: regenerated when every task is done."""

from __future__ import annotations

from pathlib import Path

from orchestrator.atomic import write_atomic
from orchestrator.report import (
    HUMAN_NOTES_HEADING,
    existing_human_notes,
    render_html,
    task_table,
    timing_summary,
)
from orchestrator.schema import TodoState
from tasks.session import Session
from tasks.synthesis import synthesis_sections


def write_findings(session: Session, state: TodoState) -> list[Path]:
    folder = session.reports_dir / state.campaign
    document_path = folder / "findings.md"
    notes = existing_human_notes(document_path)
    sections = [f"# Findings: campaign `{state.campaign}`\n"]
    sections += synthesis_sections(session, state, folder)
    sections.append("## Tasks\n\n" + task_table(state) + "\n" + timing_summary(state))
    sections.append(f"{HUMAN_NOTES_HEADING}\n\n{notes}")
    text = "\n".join(sections)
    write_atomic(document_path, text.encode())
    write_atomic(folder / "findings.html", render_html(text).encode())
    return [document_path]
