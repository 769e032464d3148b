"""The `experiments` unit's refs: the decision record as a todo (its model is the decision
domain's, tasks/decisions/record.py)."""

from __future__ import annotations

from orchestrator.refs import TaskRef
from tasks.decisions.record import DecisionRecord

DECISION_RECORD = TaskRef("decision_record", DecisionRecord)
"""The decision record as a todo: what the campaign predicted for each option, stored when the
campaign's own measurements were done, before any experiment ran, so the findings can set the
prediction beside what the experiment then measured (and never re-predict after the fact)."""
