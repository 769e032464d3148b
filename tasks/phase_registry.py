"""Phases added by later modules (macro, micro, capture, analysis)."""

from __future__ import annotations

from orchestrator.campaign import TaskSpec
from tasks.session import Session


def extra_phase_specs(session: Session, phases: list[str]) -> list[TaskSpec]:
    return []
