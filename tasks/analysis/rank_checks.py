"""Do the traces given together look like one run's ranks? A folder of unrelated captures would
otherwise read as ranks of one run, with an imbalance between them that means nothing."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any


def rank_warnings(ranks: list[dict[str, Any]], fallback: list[int]) -> list[str]:
    """Warnings on duplicate declared ranks, disagreeing world sizes and one profiler session in
    two files. Ranks declared twice are renumbered in place by file order (``fallback``), so
    every row of the breakdown is told apart."""
    warnings = []
    declared = Counter(r["rank"] for r in ranks)
    doubled = sorted(rank for rank, count in declared.items() if count > 1)
    if doubled:
        warnings.append(
            f"{sum(declared[r] for r in doubled)} traces say they are rank {', '.join(map(str, doubled))}"
            " (their distributedInfo or file name): not the ranks of one run (or one rank's trace twice);"
            " they are numbered by file order and the imbalance between them is not a rank imbalance"
        )
        for entry, rank in zip(ranks, fallback, strict=True):
            entry["rank"] = rank
    sizes = {r.get("world_size") for r in ranks} - {None}
    if len(sizes) > 1:
        warnings.append(
            f"the traces disagree on the world size ({', '.join(map(str, sorted(sizes)))}):"
            " they come from different runs"
        )
    elif sizes and len(ranks) > (size := sizes.pop()):
        warnings.append(f"{len(ranks)} traces for a world of {size}: some are from another run")
    sessions = Counter(r.get("trace_id") for r in ranks if r.get("trace_id"))
    for trace_id, count in sessions.items():
        if count > 1:
            files = [Path(r["trace"]).name for r in ranks if r.get("trace_id") == trace_id]
            warnings.append(
                f"{', '.join(files)} come from one profiler session (trace_id {trace_id}):"
                " a trace and a part of it, or a copy"
            )
    return warnings
