"""What the engine runs: task specs, the resources tasks need, and the report hook.

A task says what it needs (dependencies; resources such as "the service is up" or "the
accelerators are free"), what it produces (a typed result: a pydantic model the engine checks
when the result is written and when it is read back), what it depends on in the configuration
(``inputs``: a change there re-runs it and its dependents) and how to run. It must be safe to
run again: a crash mid-run means it runs again on resume.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from orchestrator.errors import InputError, OrchestrateError, TaskFailed, UnitBug
from orchestrator.refs import NeedRef, ResultT, TaskRef, ref_id
from orchestrator.schema import Priority, Status, TodoState

FactsT = TypeVar("FactsT", bound=BaseModel)


class TaskSkipped(OrchestrateError):
    """Raised by a task that does not apply here (e.g. a GPU path on a CPU host)."""


@dataclass
class TaskContext:
    """What a running task may use: the results it declared it reads (``input``), and the facts
    that ensuring its needs reported (``need_facts``)."""

    task_id: str
    artifacts_dir: Path
    state: TodoState
    facts: dict[str, BaseModel | dict[str, Any]] = field(default_factory=dict)
    scope: str = ""
    """The task's scope (its spec's): results are read from the scope's own todos first."""
    reads: frozenset[str] | None = None
    """The ids the task (and the needs it holds) declared it reads; None: unchecked (a context a
    test or a tool builds by hand; the runner always sets it)."""
    log: Callable[[str], None] = print
    progress: Callable[..., None] = lambda label, done, total, unit="", note="": None
    """How far a long step of the task is: ``progress(label, done, total, unit, note)``; shown
    live on a terminal, as throttled lines elsewhere (orchestrator/progress.py)."""

    def input(self, ref: TaskRef[ResultT]) -> ResultT:
        """The completed result of ``ref`` as its typed model (a declared dependency's). A scoped
        task (an experiment's re-run of a phase) reads its scope's version of the task where the
        scope has one, the campaign's otherwise."""
        result = self.optional_input(ref)
        if result is None:
            raise TaskFailed(
                f"'{self.task_id}' needs the result of '{self._resolve(ref)}', which has none;"
                f" `orchestrate reset {self._resolve(ref)}` and `orchestrate resume`"
            )
        return result

    def optional_input(self, ref: TaskRef[ResultT]) -> ResultT | None:
        """``input``, or None where that task has no completed result (a disabled phase)."""
        if self.reads is not None and ref.id not in self.reads:
            raise UnitBug(
                f"unit bug: task '{self.task_id}' reads the result of '{ref.id}' without declaring"
                f" it: add it to the depends_on or optional of '{self.task_id}''s TaskSpec"
            )
        task_id = self._resolve(ref)
        todo = self.state.by_id().get(task_id)
        if todo is None or todo.status != Status.completed or todo.result is None:
            return None
        if ref.model is None:
            raise UnitBug(f"unit bug: '{self.task_id}' reads '{task_id}' through an untyped TaskRef")
        try:
            return ref.model.model_validate(todo.result)
        except ValidationError as err:
            raise TaskFailed(
                f"the result of '{task_id}' does not match {ref.model.__name__}:"
                f" {err.errors()[0]['loc']}: {err.errors()[0]['msg']}"
            ) from None

    def need_facts(self, need: NeedRef | str, model: type[FactsT]) -> FactsT:
        """What ensuring ``need`` reported, as its typed model (the task must hold the need)."""
        if need not in self.facts:
            raise UnitBug(
                f"unit bug: task '{self.task_id}' reads the facts of need '{need}' it does not hold:"
                f" add '{need}' to its TaskSpec's needs"
            )
        facts = self.facts[need]
        return facts if isinstance(facts, model) else model.model_validate(facts)

    def _resolve(self, ref: TaskRef[Any]) -> str:
        if self.scope and self.scope + ref.id in self.state.by_id():
            return self.scope + ref.id
        return ref.id


class Need(Protocol):
    """A resource a task needs held while it runs, e.g. the server up, or the GPUs free.

    Conflicts are symmetric: ensuring a need drops every held need that it lists or that lists
    it. A need named ``role@variant`` (an experiment's own server) is the variant of ``role``:
    its facts reach the task under both names, so a phase's action reads
    ``ctx.need_facts(role, Model)`` whichever variant it runs on.
    """

    name: str
    conflicts: frozenset[str]
    reads: tuple[TaskRef[Any], ...]
    """Results ensuring it reads (the server's launch reads the host facts): a task that holds
    the need may read them too."""

    def ensure(self, ctx: TaskContext) -> BaseModel | dict[str, Any]:
        """Make the resource hold (idempotently); return facts about it for the task."""

    def finish(self) -> None:
        """The campaign is over: give back what we took (e.g. stop a server we started)."""


@dataclass(frozen=True)
class TaskSpec:
    """One todo's definition. ``inputs`` are the JSON-able config parts its result depends on.

    ``ref`` names the task and its result model (a plain string: an untyped task). It waits for
    ``depends_on`` and may read their results; ``optional`` are results it reads where they exist
    (a phase that may be disabled) without waiting for them beyond what ``depends_on`` orders.
    """

    ref: TaskRef[Any]
    content: str
    kind: str
    action: Callable[[TaskContext], BaseModel | dict[str, Any]]
    depends_on: tuple[TaskRef[Any] | str, ...] = ()
    needs: tuple[NeedRef | str, ...] = ()
    priority: Priority = Priority.medium
    inputs: dict[str, Any] = field(default_factory=dict)
    optional: tuple[TaskRef[Any] | str, ...] = ()
    scope: str = ""
    """A prefix of ids this task belongs to (an experiment's chain): its reads of other tasks'
    results resolve to the scope's todos first (``TaskContext.input``)."""
    isolated: bool = False
    """A failure here fails this todo and what depends on it, not the campaign: the other todos
    go on and the findings are written (an experiment whose server does not start leaves the
    campaign's own results standing); `resume` still exits 1 and retries it."""
    reads: frozenset[str] = frozenset()
    """The ids it may read: its own ``depends_on`` and ``optional`` as first declared (a scoped
    copy keeps them while its ``depends_on`` is re-linked to its chain)."""

    def __post_init__(self) -> None:
        if isinstance(self.ref, str):
            object.__setattr__(self, "ref", TaskRef(self.ref))
        object.__setattr__(self, "depends_on", tuple(ref_id(dep) for dep in self.depends_on))
        object.__setattr__(self, "optional", tuple(ref_id(dep) for dep in self.optional))
        object.__setattr__(self, "needs", tuple(NeedRef(need) for need in self.needs))
        if not self.reads:
            object.__setattr__(self, "reads", frozenset(self.depends_on) | frozenset(self.optional))

    @property
    def id(self) -> str:
        return self.ref.id

    @property
    def result_model(self) -> type[BaseModel] | None:
        return self.ref.model


@dataclass
class Campaign:
    name: str
    tasks: list[TaskSpec]
    needs: dict[str, Need] = field(default_factory=dict)
    artifacts_dir: Path = Path("state/artifacts")
    report: Callable[[TodoState], list[Path]] | None = None
    max_attempts: int = 3
    preflight: Callable[[], list[Check]] | None = None
    """`orchestrate check`: what would stop the campaign, found before anything long starts."""
    stop: Callable[[], list[str]] | None = None
    """`orchestrate stop`: stop what the campaign started on the host; a line per thing done."""
    grow: Callable[[TodoState], list[TaskSpec]] | None = None
    """Tasks that results call for (the todo list grows from the findings, e.g. an experiment
    for each option a decision record prioritised): asked after every completed todo and when
    the state is loaded; specs already declared are ignored."""

    def extend(self, state: TodoState | None) -> list[TaskSpec]:
        """Add the specs ``grow`` asks for given ``state``; returns the ones that are new."""
        if self.grow is None or state is None:
            return []
        known = {spec.id for spec in self.tasks}
        new = [spec for spec in self.grow(state) if spec.id not in known]
        self.tasks.extend(new)
        if new:
            validate_graph(self)
        return new


@dataclass(frozen=True)
class Check:
    """One pre-flight finding: what was checked, what was found, and whether it blocks the
    campaign (then ``found`` names the setting and the fix)."""

    what: str
    found: str
    blocking: bool = False
    unreachable: bool = False
    """The host could not be reached at all (the campaign's exit code for that is 4)."""


def validate_graph(campaign: Campaign) -> None:
    """Check the task graph before anything touches a host (doit's habit).

    Duplicate ids, unknown dependencies or needs, and cycles are errors; a cycle prints its
    path ``a -> b -> a``.
    """
    ids: dict[str, TaskSpec] = {}
    for spec in campaign.tasks:
        if spec.id in ids:
            raise InputError(f"campaign {campaign.name}: task id '{spec.id}' is declared twice")
        ids[spec.id] = spec
    for spec in campaign.tasks:
        for dep in spec.depends_on:
            if dep not in ids:
                raise InputError(f"campaign {campaign.name}: task '{spec.id}' depends on unknown task '{dep}'")
        for need in spec.needs:
            if need not in campaign.needs:
                raise InputError(
                    f"campaign {campaign.name}: task '{spec.id}' needs unknown resource '{need}'"
                    f" (known: {', '.join(sorted(campaign.needs)) or 'none'})"
                )
    white, grey, black = 0, 1, 2
    colour = dict.fromkeys(ids, white)
    path: list[str] = []

    def visit(task_id: str) -> None:
        colour[task_id] = grey
        path.append(task_id)
        for dep in ids[task_id].depends_on:
            if colour[dep] == grey:
                cycle = path[path.index(dep) :] + [dep]
                raise InputError(f"campaign {campaign.name}: dependency cycle {' -> '.join(cycle)}")
            if colour[dep] == white:
                visit(dep)
        path.pop()
        colour[task_id] = black

    for task_id in ids:
        if colour[task_id] == white:
            visit(task_id)
