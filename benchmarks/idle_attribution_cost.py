"""What the idle attribution (tasks/analysis/intervals.py idle_before) adds to a rank's analysis:
one ~134 MB Kineto-layout rank (benchmarks/trace_analysis_vs_hta.py's builder: real H200 events,
replicated), read once, then analysed six times in one process, alternately with the attribution
and with it replaced by a no-op; prints each run's seconds and the reading's.

usage: python benchmarks/idle_attribution_cost.py [--dir /tmp/orchestrate-idle-bench] [--mb 134]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import tasks.analysis.breakdown as breakdown  # noqa: E402
from benchmarks.trace_analysis_vs_hta import build  # noqa: E402
from tasks.analysis.step_markers import step_marker  # noqa: E402
from tasks.analysis.trace_reader import read_columns  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", type=Path, default=Path("/tmp/orchestrate-idle-bench"))
    parser.add_argument("--mb", type=int, default=134)
    args = parser.parse_args()
    path = build(args.dir, 1, args.mb)[0]
    started = time.perf_counter()
    columns = read_columns(path)
    reading = time.perf_counter() - started
    real = breakdown.idle_before

    def none(*_):
        return {"idle_ms_per_step": 0.0, "categories": {}, "top_kernels": []}

    seconds: dict[str, list[float]] = {"with": [], "without": []}
    for run in range(6):
        which = "with" if run % 2 == 0 else "without"
        breakdown.idle_before = real if which == "with" else none
        started = time.perf_counter()
        result = breakdown.analyze_columns(columns, breakdown.Classifier(), str(path), 0, step_marker())
        seconds[which].append(time.perf_counter() - started)
    breakdown.idle_before = real
    print(f"{path}: {path.stat().st_size / 1e6:.0f} MB, {result['decode_steps']} decode steps; reading {reading:.2f} s")
    for which, values in seconds.items():
        print(
            f"analysis {which} the idle attribution: {', '.join(f'{v:.3f}' for v in values)} s"
            f" (median {statistics.median(values):.3f})"
        )


if __name__ == "__main__":
    main()
