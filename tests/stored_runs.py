"""A GPU campaign stored under tests/data, its predictions made again by today's rules
(benchmarks/predictions_again.py), keyed the way the must-show tests read them."""

from __future__ import annotations

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
