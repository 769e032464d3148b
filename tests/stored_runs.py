"""A GPU campaign stored under tests/data, its predictions made again by today's rules
(benchmarks/predictions_again.py), keyed the way the must-show tests read them."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
sys.path.insert(0, str(ROOT))

from benchmarks.predictions_again import Row, predictions_again  # noqa: E402


def rows_by_level(todo: str, config: str) -> dict[tuple[str, int], Row]:
    """Each experiment's row at each level both the campaign and its variant served, from a campaign
    whose capture ran at c=1."""
    record, rows = predictions_again(DATA / todo, DATA / config)
    assert record.concurrency == 1
    return {(row.experiment, row.concurrency): row for row in rows}


def stored_state(todo: str, folder: Path) -> Path:
    """The stored todo file, unpacked into ``folder`` as a campaign's state file."""
    folder.mkdir(parents=True, exist_ok=True)
    state = folder / "todo.json"
    state.write_bytes(gzip.decompress((DATA / todo).read_bytes()))
    return state


def report(state: Path, config: str, reports: Path) -> str:
    """`orchestrate report` on a state file with a stored campaign config: the findings' text."""
    subprocess.run(
        [sys.executable, "-m", "orchestrate", "--config", str(DATA / config), "--state", str(state)]
        + ["--reports", str(reports), "report"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    return next(reports.glob("*/findings.md")).read_text()
