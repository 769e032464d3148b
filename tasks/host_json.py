"""Run a shipped script on the host and read the one JSON document it prints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator.errors import TaskFailed, tail_lines
from tasks.session import Session


def run_json_script(session: Session, script: Path, args: list[str], timeout_s: float,
                    env: dict[str, str] | None = None, launcher: list[str] | None = None) -> Any:
    remote = session.ship(script)
    argv = (launcher or [session.python]) + [remote, *args]
    result = session.host().run(argv, timeout_s=timeout_s, env=env)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise TaskFailed(f"{script.name} on {session.host().name} printed no JSON document",
                         output_tail=tail_lines(result.stdout + result.stderr, 40))
    try:
        return json.loads(lines[-1])
    except json.JSONDecodeError as err:
        raise TaskFailed(f"{script.name} on {session.host().name} printed malformed JSON ({err})",
                         output_tail=tail_lines(lines[-1], 5)) from None
