"""Run a shipped script on the host and read the one JSON document it prints."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.errors import TaskFailed, tail_lines
from tasks import host_progress
from tasks.session import Node, Session

HOST_PROGRESS = Path(host_progress.__file__)


def run_json_script(
    session: Session,
    script: Path,
    args: list[str],
    timeout_s: float,
    env: dict[str, str] | None = None,
    launcher: list[str] | None = None,
    node: Node | None = None,
    progress: Callable[..., None] | None = None,
) -> Any:
    """Run ``script`` on the host (or on ``node``) and return the last JSON document it printed.
    Shipped beside it: the modules of its own folder (a unit's `remote/` folder holds only host
    code, which the script may import) and tasks/host_progress.py, whose progress lines on
    stderr go to ``progress`` as they come."""
    node = node or session.nodes[0]
    for helper in [HOST_PROGRESS, *sorted(script.parent.glob("*.py"))]:
        session.ship(helper, node)
    remote = session.ship(script, node)
    argv = (launcher or [node.python]) + [remote, *args]
    host = session.node_host(node.index)
    result = host.run(
        argv, timeout_s=timeout_s, env=env, on_stderr_line=None if progress is None else progress_lines(progress)
    )
    return last_json(script.name, host.name, result.stdout, result.stderr)


def progress_lines(progress: Callable[..., None]) -> Callable[[str], None]:
    """A stderr line handler that passes the progress lines on and ignores the others."""

    def on_line(line: str) -> None:
        if (step := host_progress.parse(line)) is not None:
            progress(step["label"], step["done"], step["total"], step.get("unit", ""), step.get("note", ""))

    return on_line


def last_json(script: str, where: str, stdout: str, stderr: str = "") -> Any:
    """The last line of ``stdout`` that is a JSON document; a clear failure when there is none."""
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise TaskFailed(f"{script} on {where} printed no JSON document", output_tail=tail_lines(stdout + stderr, 40))
    try:
        return json.loads(lines[-1])
    except json.JSONDecodeError as err:
        raise TaskFailed(
            f"{script} on {where} printed malformed JSON ({err})", output_tail=tail_lines(lines[-1], 5)
        ) from None
