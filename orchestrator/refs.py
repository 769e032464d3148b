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


class NeedRef(str):
    """A resource a task needs held, by its handle: a role (``service``, ``accelerators_free``) or
    a role's variant (an experiment's own server, ``service@fp8_kv``), whose facts reach the task
    under the role too. A str, so the todo file and the runner's held set keep plain names; the
    role and variant are read from the handle, never split by hand."""

    role: str
    variant_of: str | None

    def __new__(cls, role: str, variant: str | None = None) -> NeedRef:
        if variant is None and "@" in role:  # a name read back from the todo file
            role, variant = role.split("@", 1)
        handle = super().__new__(cls, f"{role}@{variant}" if variant else role)
        handle.role, handle.variant_of = role, variant
        return handle

    def variant(self, name: str) -> NeedRef:
        """This need for a variant named ``name`` (its own resource, conflicting with the role's)."""
        return NeedRef(self.role, name)
