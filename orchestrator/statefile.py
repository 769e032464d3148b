"""Load, save and lock `state/todo.json`.

Saved after every transition (never only at the end) with an atomic rename, so SIGKILL at any
moment leaves a file that loads. A file that cannot be read is never overwritten: the error
names it and says how to recover.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import sys
import time
from pathlib import Path

import orjson
from pydantic import ValidationError

from orchestrator.atomic import write_atomic
from orchestrator.errors import InputError, StateLocked
from orchestrator.schema import STATE_SCHEMA_VERSION, TodoState, now
from orchestrator.validation import one_line


def load_state(path: Path) -> TodoState | None:
    """The state at ``path``, or None when there is none yet."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise InputError(f"{path}: cannot be read ({err.strerror}); check --state and its permissions") from None
    fix = f"fix or move it aside (e.g. `mv {path} {path}.bad`) and run `orchestrate init`"
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError as err:
        raise InputError(f"{path}: not valid JSON ({err}); {fix}") from None
    version = document.get("schema_version") if isinstance(document, dict) else None
    if version == 1:
        # Schema 1 held untyped results and no record of their inputs: they cannot be trusted
        # to match what this version would compute, so no silent migration.
        raise InputError(
            f"{path}: field 'schema_version': 1 was written by an older orchestrate (untyped"
            " results, no input record); start over with `orchestrate init --force` (the old"
            " file is kept as .bak)"
        )
    if version not in (None, STATE_SCHEMA_VERSION):
        raise InputError(
            f"{path}: field 'schema_version': unsupported version {version!r}"
            f" (this orchestrate reads {STATE_SCHEMA_VERSION}); use the orchestrate that wrote it, or {fix}"
        )
    try:
        return TodoState.model_validate(document)
    except ValidationError as err:
        raise InputError(one_line(err, path, fix)) from None


_last_written: dict[Path, bytes] = {}
"""What this process last wrote to each state file (its digest): a file that differs on the next
write was edited by someone else while the campaign held it."""


def save_state(path: Path, state: TodoState) -> None:
    state.updated_at = now()
    data = orjson.dumps(state.model_dump(mode="json"), option=orjson.OPT_INDENT_2)
    key = path.resolve()
    _keep_a_hand_edit(path, _last_written.get(key))
    try:
        write_atomic(path, data)
    except OSError as err:
        raise InputError(f"{path}: cannot be written ({err.strerror}); choose a writable --state") from None
    _last_written[key] = hashlib.sha256(data).digest()


def _keep_a_hand_edit(path: Path, expected: bytes | None) -> None:
    """A state file changed on disk since this process wrote it (a hand edit during a run) is
    copied aside and named on stderr before the campaign's state replaces it: nothing is lost
    silently, and the edit can be applied once the campaign has stopped."""
    if expected is None:
        return
    try:
        current = path.read_bytes()
    except OSError:
        return
    if hashlib.sha256(current).digest() == expected:
        return
    kept = path.with_name(f"{path.name}.edited-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
    write_atomic(kept, current)
    print(
        f"orchestrate: {path} was changed on disk while this campaign held it; your version is kept as"
        f" {kept} and the campaign's state written over it (stop the campaign, then edit the todo file)",
        file=sys.stderr,
    )


class StateLock:
    """An exclusive, advisory lock beside the state file, released by the kernel if we die.

    flock dies with the process, so a SIGKILLed orchestrator never leaves a stale lock; the
    holder's pid is written inside so the refusal can name it.
    """

    def __init__(self, state_path: Path) -> None:
        self.path = state_path.with_name(state_path.name + ".lock")
        self.state_path = state_path
        self._fd: int | None = None

    def __enter__(self) -> StateLock:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise InputError(
                f"{self.path.with_suffix('')}: its folder cannot be written ({err.strerror}); choose a writable --state"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise StateLocked(
                f"{self.path.with_suffix('')}: another orchestrate (pid {holder}) is running on this"
                " state; wait for it to finish or stop it first"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd
        _last_written.pop(self.state_path.resolve(), None)  # what others wrote before this hold is theirs
        return self

    def __exit__(self, *exc: object) -> None:
        _last_written.pop(self.state_path.resolve(), None)
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
