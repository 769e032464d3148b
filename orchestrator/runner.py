"""Drive the todo state like a state machine until every task is done or one fails.

Order: a ready task (its dependencies completed or skipped) whose needs already hold goes
first, then one with no needs, then by priority and declaration order. Grouping by held
resource is what keeps the server loaded once per campaign: every task that needs the service
runs while it is up, before a task that needs the accelerators free stops it.
"""

from __future__ import annotations

import shutil
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.campaign import Campaign, TaskContext, TaskSkipped, TaskSpec, validate_graph
from orchestrator.errors import (
    ConnectionLost,
    HostError,
    InputError,
    Interrupted,
    OrchestrateError,
    TaskFailed,
    UnitBug,
    tail_lines,
)
from orchestrator.progress import ProgressDisplay
from orchestrator.results import (
    check_stored_results,
    result_document,
    stale_reason,
    upstream_digests,
)
from orchestrator.schema import Priority, Status, Todo, TodoError, TodoState, now
from orchestrator.statefile import StateLock, load_state, save_state

PRIORITY_RANK = {Priority.high: 0, Priority.medium: 1, Priority.low: 2}
DONE = (Status.completed, Status.skipped)


def todo_from_spec(spec: TaskSpec) -> Todo:
    return Todo(
        id=spec.id,
        content=spec.content,
        priority=spec.priority,
        kind=spec.kind,
        depends_on=list(spec.depends_on),
        needs=list(spec.needs),
    )


def merge_plan(campaign: Campaign, state: TodoState | None, state_path: Path) -> TodoState:
    """The campaign's todos with the progress recorded in ``state``.

    New tasks are added as pending; a recorded task the campaign no longer declares is an
    error (its results would silently vanish from the report).
    """
    campaign.extend(state)  # what the recorded results called for is declared too
    if state is None:
        return TodoState(campaign=campaign.name, todos=[todo_from_spec(s) for s in campaign.tasks])
    if state.campaign != campaign.name:
        raise InputError(
            f"{state_path}: field 'campaign': holds campaign '{state.campaign}', the config says"
            f" '{campaign.name}'; use --state for another file or `orchestrate init --force`"
        )
    recorded = state.by_id()
    declared = {spec.id for spec in campaign.tasks}
    unknown = [todo_id for todo_id in recorded if todo_id not in declared]
    if unknown:
        raise InputError(
            f"{state_path}: todo '{unknown[0]}' is not in the campaign's config; restore the"
            " config that made it or start over with `orchestrate init --force`"
        )
    todos = []
    for spec in campaign.tasks:
        fresh = todo_from_spec(spec)
        old = recorded.get(spec.id)
        if old is not None:
            fresh = old.model_copy(
                update={
                    "content": spec.content,
                    "priority": spec.priority,
                    "kind": spec.kind,
                    "depends_on": list(spec.depends_on),
                    "needs": list(spec.needs),
                }
            )
        todos.append(fresh)
    return state.model_copy(update={"todos": todos})


def dependents_of(state: TodoState, task_id: str) -> list[str]:
    """``task_id`` and every todo that depends on it, directly or not, in file order."""
    selected = {task_id}
    changed = True
    while changed:
        changed = False
        for todo in state.todos:
            if todo.id not in selected and selected.intersection(todo.depends_on):
                selected.add(todo.id)
                changed = True
    return [todo.id for todo in state.todos if todo.id in selected]


class Runner:
    def __init__(
        self,
        campaign: Campaign,
        state_path: Path,
        log: Callable[[str], None] = print,
        progress: ProgressDisplay | None = None,
    ) -> None:
        self.campaign = campaign
        self.state_path = state_path
        self.log = log
        self.progress = progress or ProgressDisplay()
        self.specs = {spec.id: spec for spec in campaign.tasks}
        self.held: set[str] = set()
        self.facts: dict[str, Any] = {}

    # -- the loop ---------------------------------------------------------------------------
    def resume(self) -> TodoState:
        validate_graph(self.campaign)
        with StateLock(self.state_path), _sigterm_as_interrupt():
            state = merge_plan(self.campaign, load_state(self.state_path), self.state_path)
            self.specs = {spec.id: spec for spec in self.campaign.tasks}  # with what it grew
            check_stored_results(self.campaign, state, self.state_path)
            for todo in state.todos:
                if todo.status == Status.failed:
                    todo.status = Status.pending  # `resume` retries failed tasks
                elif todo.status == Status.in_progress:
                    self._interrupted(todo)
            self._requeue_stale(state)
            save_state(self.state_path, state)
            isolated: list[str] = []
            try:
                self._loop(state, isolated)
            except (OrchestrateError, KeyboardInterrupt) as err:
                if not isinstance(err, HostError):  # a lost host cannot be asked what runs there
                    self._say_left_running()
                raise
            self._finish(state)
            if isolated:
                raise TaskFailed(
                    f"{len(isolated)} todo(s) failed, the rest of the campaign is done"
                    f" (`orchestrate resume` retries them): {'; '.join(isolated)}"
                )
            return state

    def _say_left_running(self) -> None:
        """After a failure the held servers stay up (`resume` goes on without a reload): say so,
        and how to stop them, on stderr."""
        for name in sorted(self.held):
            left_running = getattr(self.campaign.needs.get(name), "left_running", None)
            try:
                what = left_running() if left_running is not None else None
            except Exception:  # noqa: BLE001 - a hint; the failure being reported matters more
                what = None
            if what:
                print(
                    f"orchestrate: {what} is still up, kept so `orchestrate resume` goes on without"
                    " loading it again; `orchestrate stop` stops it",
                    file=sys.stderr,
                )

    def _loop(self, state: TodoState, isolated: list[str]) -> None:
        """Run todos until none is ready; a failure of an isolated todo (an experiment's) is noted
        in ``isolated`` and the rest goes on."""
        while (todo := self._next(state, isolated)) is not None:
            try:
                self._run_one(state, todo)
                self._grow(state)
            except ConnectionLost as lost:
                # The host went away mid-task; the transport reconnects with backoff, and
                # the task (idempotent) runs again within its attempt limit.
                self.log(f"[{todo.id}] {lost}; running it again")
                todo.status = Status.pending
                save_state(self.state_path, state)
            except OrchestrateError as err:
                if not self.specs[todo.id].isolated or todo.status != Status.failed:
                    raise
                isolated.append(f"{todo.id}: {err}")
                self.log(f"[{todo.id}] failed: {err}; what depends on it waits for `resume`, the rest goes on")

    def _grow(self, state: TodoState) -> None:
        """New todos the results now call for, appended pending (and saved) before the next pick."""
        new = self.campaign.extend(state)
        if not new:
            return
        for spec in new:
            self.specs[spec.id] = spec
            state.todos.append(todo_from_spec(spec))
        save_state(self.state_path, state)
        self.log(f"the todo list grew by {len(new)}: {', '.join(spec.id for spec in new)}")

    def _interrupted(self, todo: Todo) -> None:
        """A todo in progress when we took the lock was cut short by a controller that died
        (SIGKILL, a crash, the host rebooting): not a failure of the task, so its attempt is
        given back. No limit: every interruption took a person (or a supervisor) to run
        `resume` again, so nothing loops on its own; the count is kept in the todo."""
        todo.status = Status.pending
        todo.interruptions += 1
        todo.attempts = max(0, todo.attempts - 1)
        self.log(
            f"[{todo.id}] was cut short ({todo.interruptions} time(s)): the controller stopped"
            " during it; it runs again without using an attempt"
        )

    def _requeue_stale(self, state: TodoState) -> None:
        """A completed todo whose inputs changed goes back to pending with its dependents."""
        requeued: set[str] = set()
        for todo in state.todos:
            if todo.id in requeued:
                continue
            reason = stale_reason(todo, self.specs[todo.id], state)
            if reason is None:
                continue
            ids = dependents_of(state, todo.id)
            for other in state.todos:
                if other.id in ids and other.status in DONE:
                    _clear(other)
            requeued.update(ids)
            also = [i for i in ids if i != todo.id]
            self.log(
                f"[{todo.id}] runs again: {reason}" + (f"; so do its dependents {', '.join(also)}" if also else "")
            )

    def _next(self, state: TodoState, isolated: list[str] | None = None) -> Todo | None:
        status = {todo.id: todo.status for todo in state.todos}
        ready = [
            todo
            for todo in state.todos
            if todo.status in (Status.pending, Status.in_progress)
            and all(status[dep] in DONE for dep in todo.depends_on)
        ]
        if not ready:
            blocked = [t.id for t in state.todos if t.status not in DONE]
            if blocked and not isolated:
                raise TaskFailed(f"todos {', '.join(blocked)} can never run: a dependency failed")
            return None
        order = {todo.id: index for index, todo in enumerate(state.todos)}

        def rank(todo: Todo) -> tuple[int, int, int]:
            if todo.needs and set(todo.needs) <= self.held:
                group = 0
            elif not todo.needs:
                group = 1
            else:
                group = 2
            return (group, PRIORITY_RANK[todo.priority], order[todo.id])

        return min(ready, key=rank)

    def _run_one(self, state: TodoState, todo: Todo) -> None:
        spec = self.specs[todo.id]
        if todo.attempts >= self.campaign.max_attempts:
            todo.status = Status.failed
            todo.error = TodoError(
                message=f"gave up after {todo.attempts} attempts; fix the cause, then"
                f" `orchestrate reset {todo.id}` and `orchestrate resume`",
                kind="AttemptsExhausted",
                output_tail=todo.error.output_tail if todo.error else "",
            )
            save_state(self.state_path, state)
            raise TaskFailed(f"todo '{todo.id}': {todo.error.message}")
        todo.status = Status.in_progress
        todo.attempts += 1
        todo.started_at = now()
        todo.finished_at = None
        todo.inputs = spec.inputs
        todo.upstream = upstream_digests(state, spec)
        started = time.monotonic()
        # Everything from the save on is inside the try: a Ctrl-C right after the file says
        # in_progress (seen once in a loaded test run) must still put the todo back to pending.
        try:
            save_state(self.state_path, state)
            self.log(f"[{todo.id}] {todo.content} (attempt {todo.attempts})")
            ctx = TaskContext(
                task_id=todo.id,
                scope=spec.scope,
                reads=spec.reads
                | {ref.id for need in spec.needs for ref in getattr(self.campaign.needs[need], "reads", ())},
                artifacts_dir=self.campaign.artifacts_dir / todo.id,
                state=state,
                log=lambda line: self.log(f"[{todo.id}] {line}"),
                progress=lambda *step, **more: self.progress.update(todo.id, *step, **more),
            )
            for need in spec.needs:
                self._ensure(need, ctx)
            ctx.facts = {need: self.facts.get(need, {}) for need in spec.needs}
            ctx.facts |= {need.role: ctx.facts[need] for need in spec.needs if need.variant_of}
            result = result_document(spec, spec.action(ctx))
        except TaskSkipped as skip:
            todo.skipped_reason = str(skip)
            self._close(state, todo, started, Status.skipped)
            self.log(f"[{todo.id}] skipped: {skip}")
            return
        except KeyboardInterrupt:
            # Back to pending: the attempt did not fail, the user stopped it.
            todo.status, todo.attempts = Status.pending, todo.attempts - 1
            todo.started_at = todo.finished_at = todo.duration_s = None
            save_state(self.state_path, state)
            raise Interrupted(
                f"interrupted during '{todo.id}'; state saved to {self.state_path},"
                " `orchestrate resume` goes on from there"
            ) from None
        except Exception as err:  # every failure is recorded, then re-raised
            tail = getattr(err, "output_tail", "") or ""
            todo.error = TodoError(
                message=str(err) or repr(err), kind=type(err).__name__, output_tail=tail_lines(tail, 40)
            )
            if isinstance(err, InputError | HostError | UnitBug) and not isinstance(err, ConnectionLost):
                # Bad input, no access (auth, host key, a missing file) or a bug in a unit: not
                # the task's failure, and retrying changes nothing until it is fixed.
                todo.attempts -= 1
            self._close(state, todo, started, Status.failed)
            if isinstance(err, OrchestrateError):
                raise
            raise TaskFailed(f"todo '{todo.id}' failed: {type(err).__name__}: {err}", output_tail=tail) from err
        finally:
            self.progress.end(todo.id)  # its bars go before the line that says how it ended
        self._close(state, todo, started, Status.completed, result=result)
        self.log(f"[{todo.id}] completed in {todo.duration_s:.1f} s")

    def _close(
        self, state: TodoState, todo: Todo, started: float, status: Status, result: dict[str, Any] | None = None
    ) -> None:
        todo.status = status
        todo.finished_at = now()
        todo.duration_s = round(time.monotonic() - started, 3)
        if status in DONE:
            todo.error = None
            todo.result = result if status == Status.completed else None
        save_state(self.state_path, state)

    def _ensure(self, name: str, ctx: TaskContext) -> None:
        need = self.campaign.needs[name]
        self.facts[name] = need.ensure(ctx)
        self.held = {
            held for held in self.held if held not in need.conflicts and name not in self.campaign.needs[held].conflicts
        }
        self.held.add(name)

    def _finish(self, state: TodoState) -> None:
        for need in self.campaign.needs.values():
            need.finish()
        self.held.clear()
        if self.campaign.report is not None:
            for path in self.campaign.report(state):
                self.log(f"report written: {path}")


def reset(campaign: Campaign, state_path: Path, task_id: str) -> list[str]:
    """Re-queue ``task_id`` and everything that depends on it; returns the ids re-queued."""
    with StateLock(state_path):
        state = merge_plan(campaign, load_state(state_path), state_path)
        if task_id not in state.by_id():
            known = ", ".join(todo.id for todo in state.todos)
            raise InputError(f"{state_path}: no todo '{task_id}' (known: {known})")
        ids = dependents_of(state, task_id)
        for todo in state.todos:
            if todo.id in ids:
                _clear(todo)
        save_state(state_path, state)
        # `reset` means "do it again": a task that keeps what an earlier attempt left (fetched
        # traces, a pending capture) must not find it.
        for todo_id in ids:
            shutil.rmtree(campaign.artifacts_dir / todo_id, ignore_errors=True)
        return ids


def _clear(todo: Todo) -> None:
    """Back to a never-run todo: pending, no attempts, no result."""
    todo.status, todo.attempts, todo.error = Status.pending, 0, None
    todo.started_at = todo.finished_at = None
    todo.duration_s, todo.result, todo.skipped_reason = None, None, None
    todo.inputs, todo.upstream = None, {}


class _sigterm_as_interrupt:
    """SIGTERM behaves like Ctrl-C, so `kill` also leaves a consistent state."""

    def __enter__(self) -> None:
        self._previous = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, signal.default_int_handler)

    def __exit__(self, *exc: object) -> None:
        signal.signal(signal.SIGTERM, self._previous)
