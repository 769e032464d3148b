"""Typed results and what they came from.

A task's result is checked against its pydantic model when it is written (a task that returns
the wrong shape fails, instead of a report failing later) and when the state is read back (a
hand-edited or foreign file is named, not half-trusted). Each completed todo records the config
parts its task declared (``inputs``) and, for every dependency, a token of the run whose result
it used (``upstream``: that todo's own inputs, upstream and finish time, so a re-run upstream is
seen while moving the state folder, which rewrites result paths, is not). On `resume`, a todo
whose record no longer matches goes back to pending with its dependents, so a config change
re-runs exactly what it affects (doit's ``config_changed``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ValidationError

from orchestrator.campaign import Campaign, TaskSpec
from orchestrator.errors import InputError, TaskFailed
from orchestrator.schema import Status, Todo, TodoState


def result_document(spec: TaskSpec, result: BaseModel | dict[str, Any] | None) -> dict[str, Any]:
    """The JSON document to store for ``result``, checked against the spec's model."""
    if isinstance(result, BaseModel):
        if spec.result_model is not None and not isinstance(result, spec.result_model):
            raise TaskFailed(
                f"task '{spec.id}' returned {type(result).__name__}, not"
                f" {spec.result_model.__name__} (a bug in the task)"
            )
        return result.model_dump(mode="json")
    document = result or {}
    if spec.result_model is not None:
        try:
            return spec.result_model.model_validate(document).model_dump(mode="json")
        except ValidationError as err:
            first = err.errors()[0]
            raise TaskFailed(
                f"task '{spec.id}' returned a result that does not match"
                f" {spec.result_model.__name__}: {_loc(first['loc'])}: {first['msg']}"
                " (a bug in the task)"
            ) from None
    return document


def check_stored_results(campaign: Campaign, state: TodoState, state_path: Path) -> None:
    """Every completed todo's result still matches its task's model, or one line names it."""
    specs = {spec.id: spec for spec in campaign.tasks}
    for todo in state.todos:
        spec = specs.get(todo.id)
        if spec is None or spec.result_model is None or todo.status != Status.completed:
            continue
        try:
            spec.result_model.model_validate(todo.result or {})
        except ValidationError as err:
            first = err.errors()[0]
            raise InputError(
                f"{state_path}: todo '{todo.id}' field 'result.{_loc(first['loc'])}': {first['msg']};"
                f" `orchestrate reset {todo.id}` runs it again (or `orchestrate init --force`)"
            ) from None


def digest(document: Any) -> str:
    """A short, order-independent digest of a JSON-able document."""
    return hashlib.sha256(orjson.dumps(document, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def run_token(todo: Todo) -> str:
    """Which run of ``todo`` produced its result: changes when it runs again, or its inputs do."""
    return digest(
        {
            "inputs": todo.inputs,
            "upstream": todo.upstream,
            "status": todo.status.value,
            "finished_at": todo.finished_at.isoformat() if todo.finished_at else None,
        }
    )


def upstream_digests(state: TodoState, spec: TaskSpec) -> dict[str, str]:
    todos = state.by_id()
    return {dep: run_token(todos[dep]) for dep in spec.depends_on if dep in todos}


def stale_reason(todo: Todo, spec: TaskSpec, state: TodoState) -> str | None:
    """Why a completed todo no longer matches its inputs, or None when it still does."""
    if todo.status != Status.completed:
        return None
    changed = list(changed_keys(todo.inputs or {}, spec.inputs))
    if changed:
        shown = "; ".join(changed[:4]) + (f" (+{len(changed) - 4} more)" if len(changed) > 4 else "")
        return f"config changed: {shown}"
    now = upstream_digests(state, spec)
    moved = [dep for dep, value in now.items() if todo.upstream.get(dep) != value]
    if moved:
        return f"{', '.join(moved)} ran again since it ran"
    return None


def changed_keys(old: Any, new: Any, prefix: str = "") -> Iterator[str]:
    """Dotted keys whose values differ, with old -> new for leaves."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            yield from changed_keys(old.get(key), new.get(key), f"{prefix}{key}.")
        return
    if old != new:
        yield f"{prefix.rstrip('.')} ({_short(old)} -> {_short(new)})"


def _short(value: Any) -> str:
    text = "unset" if value is None else orjson.dumps(value).decode()
    return text if len(text) <= 40 else text[:37] + "..."


def _loc(loc: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(top level)"
