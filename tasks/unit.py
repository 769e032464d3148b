"""A phase unit: one phase in one place, found by one name.

The name is the phase's key in `campaign.phases`, its `campaign.toml` section, its package
under `tasks/` and the prefix of its task ids. A unit holds its config section, its task specs
(each with a typed result model), its needs, and the findings section it contributes. Adding a
phase is writing a unit and adding it to `tasks/registry.py`; nothing else changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from orchestrator.campaign import Check, Need, TaskSpec
from orchestrator.refs import TaskRef
from orchestrator.schema import TodoState

if TYPE_CHECKING:
    from tasks.session import Session
    from tasks.view import Findings


@dataclass(frozen=True)
class PhaseUnit:
    name: str
    specs: Callable[[Session, frozenset[str]], list[TaskSpec]]
    """The unit's tasks, given the session and the names of every enabled unit."""
    results: tuple[TaskRef[Any], ...] = ()
    """The refs of every task it may declare (its `results.py`'s): what the findings may read."""
    config: Any = None
    """The type of its `campaign.toml` section (keyed by ``name``), or None."""
    config_default: Callable[[], Any] | None = None
    extra_config: dict[str, tuple[Any, Any]] | None = None
    """Top-level keys it owns besides its section (name -> pydantic field), e.g. `[[nodes]]`."""
    requires: tuple[str, ...] = ()
    """Units that must run too (enabled with it)."""
    needs: Callable[[Session], dict[str, Need]] | None = None
    section: Callable[[Findings], str] | None = None
    """Its part of the findings document, placed in campaign order."""
    runs_on_variants: bool = False
    """Its tasks run again on an experiment's variant server: what a server change changes (the
    model's facts, the server, serving, the capture and its analysis), not the microbenchmarks."""
    closing_section: Callable[[Findings], str] | None = None
    """Its part placed after the decision record (what reads the record: the experiments)."""
    selectable: bool = True
    """Listed in `campaign.phases`; False for units that run whenever their config has tasks."""
    checks: Callable[[Session], list[Check]] | None = None
    """Its part of `orchestrate check`: quick looks at the host that find what would fail later."""
    stop: Callable[[Session], list[str]] | None = None
    """Its part of `orchestrate stop`: stop what it started on the host, a line per thing done."""
    grow: Callable[[Session, TodoState], list[TaskSpec]] | None = None
    """Tasks its todos' results call for (experiments of the options a decision record chose)."""


def enabled_units(units: list[PhaseUnit], phases: list[str]) -> list[PhaseUnit]:
    """The units asked for, the units they require (transitively), and the always-on ones,
    in registry order."""
    by_name = {unit.name: unit for unit in units}
    wanted: set[str] = set()
    pending = [*phases, *(unit.name for unit in units if not unit.selectable)]
    while pending:
        name = pending.pop()
        if name not in wanted:
            wanted.add(name)
            pending.extend(by_name[name].requires)
    return [unit for unit in units if unit.name in wanted]
