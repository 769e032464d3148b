"""The findings document under `reports/<campaign>/`, assembled from the units' sections.

Order: the summary and setup (cross-phase), each enabled unit's section in campaign order, then
the cross-phase sections (cross-checks, bottleneck, decision record, baseline, the config the
results came from), the task table and the human notes (kept verbatim). Every section reads
typed results through ``tasks.view.Findings``.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.atomic import write_atomic
from orchestrator.campaign import TaskSpec
from orchestrator.errors import InputError
from orchestrator.report import (
    HUMAN_NOTES_HEADING,
    existing_human_notes,
    render_html,
    task_table,
    timing_summary,
)
from orchestrator.schema import TodoState
from tasks.decisions.ledger import LEDGER_NAME, append
from tasks.session import Session
from tasks.synthesis import analysis_sections, opening_sections, record_sections
from tasks.unit import PhaseUnit
from tasks.view import Findings


def write_findings(
    session: Session,
    state: TodoState,
    units: list[PhaseUnit],
    specs: dict[str, TaskSpec],
    declared: frozenset[str] | None = None,
) -> list[Path]:
    """``units`` are the enabled units, ``declared`` the task ids any unit may declare."""
    folder = session.reports_dir / state.campaign
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"{folder}: cannot be created ({err.strerror}); choose a writable --reports") from None
    document_path = folder / "findings.md"
    notes = existing_human_notes(document_path)
    findings = Findings(session, state, folder, specs, declared=declared)
    sections = [f"# Findings: campaign `{state.campaign}`\n"]
    sections += opening_sections(findings)
    sections += [unit.section(findings) for unit in units if unit.section is not None]
    sections += analysis_sections(findings)
    sections += [unit.closing_section(findings) for unit in units if unit.closing_section is not None]
    sections += record_sections(findings)
    sections.append("## Tasks\n\n" + task_table(state) + "\n" + timing_summary(state))
    sections.append(f"{HUMAN_NOTES_HEADING}\n\n{notes}")
    text = "\n".join(section for section in sections if section)
    write_document(findings, document_path, text)
    return [document_path]


def write_document(findings: Findings, document_path: Path, text: str) -> None:
    """The writers, once every section is computed: the files the sections attached (CSV, plots,
    baseline.json), the ledger's new records, then the Markdown and its HTML rendering."""
    folder = document_path.parent
    for name, content in findings.outputs.files.items():
        write_atomic(folder / name, content, shared=True)
    if findings.outputs.ledger:
        append(findings.session.reports_dir / LEDGER_NAME, findings.outputs.ledger)
    write_atomic(document_path, text.encode(), shared=True)
    write_atomic(
        folder / "findings.html",
        render_html(text, folder, f"findings: {findings.state.campaign}").encode(),
        shared=True,
    )
