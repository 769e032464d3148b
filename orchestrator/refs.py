"""Typed handles by which tasks read each other: a task's id and its result's model, one object.

A unit declares its refs once, in its `results.py`, beside the models; specs, reads and the
findings name a task through its ref, never by a string. Rename an id there and every
dependency, read and findings section follows; a read a task did not declare is a unit bug
(``TaskContext.input``), not a silently missing section.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

ResultT = TypeVar("ResultT", bound=BaseModel)


@dataclass(frozen=True)
class TaskRef(Generic[ResultT]):
    """A task's id with the model its result validates against (None: an untyped result, such as
    a user's `[[commands]]` todo's)."""

    id: str
    model: type[ResultT] | None = None

    def __str__(self) -> str:
        return self.id

    def scoped(self, prefix: str) -> TaskRef[ResultT]:
        """The same task re-run in a scope (an experiment's chain: `exp_<name>_` + id)."""
        return TaskRef(prefix + self.id, self.model)


def ref_id(ref: TaskRef[Any] | str) -> str:
    """The id a dependency names; a plain string is an untyped task of the same id."""
    return ref.id if isinstance(ref, TaskRef) else ref
