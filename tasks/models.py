"""The base models of everything a user or a task writes down: a `campaign.toml` section and a
task's stored result, both refusing unknown keys. Imports nothing of ours, so any module may
use them without reaching the units (the typed config, tasks/config_types.py, needs that)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

NOT_AN_INPUT: dict[str, Any] = {"input_of": []}
"""A config field's marker (``Field(..., json_schema_extra=NOT_AN_INPUT)``): it changes no stored
result (a label, a timeout, a threshold the findings judge stored figures by), so a change to it
re-runs nothing."""


ADDED_LATER: dict[str, Any] = {"recorded_off_default": True}
"""A config field's marker: an input recorded only when it is off its default. For a field added
after results were stored: those came from its default, and a todo without the key is not stale."""


def input_of(*task_ids: str) -> dict[str, Any]:
    """A config field's marker: it changes the results of these tasks of its section only."""
    return {"input_of": list(task_ids)}


class Section(BaseModel):
    """A `campaign.toml` section: unknown keys are errors."""

    # strict: TOML has types, and a value of the wrong one is a mistake, not something to coerce
    # (`concurrency_max = true` read as 1 ran only c=1; "8" for a number, 1.5 for a count).
    model_config = ConfigDict(extra="forbid", strict=True)

    def inputs_for(self, task_id: str) -> dict[str, Any]:
        """The fields whose change makes ``task_id``'s stored result stale: every field of the
        section but those marked (NOT_AN_INPUT, or input_of other tasks), as the todo records them."""
        names = {
            name
            for name, info in type(self).model_fields.items()
            if task_id in input_tasks(info, task_id)
            and not (
                _extra(info).get("recorded_off_default")
                and getattr(self, name) == info.get_default(call_default_factory=True)
            )
        }
        return self.model_dump(include=names)


class Result(BaseModel):
    """A task's typed result, as stored in the todo file: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")


def _extra(info: Any) -> dict[str, Any]:
    return info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}


def input_tasks(info: Any, task_id: str) -> list[str]:
    """The tasks a field (pydantic FieldInfo) is an input of: its marker's, or any (``task_id``)."""
    marked = _extra(info).get("input_of")
    return [task_id] if marked is None else list(marked)
