"""Repeats and their noise: a level's runs, the spread of each run's means, and outliers.

Every serving level runs `macro.repeats` times (fresh prompts each run, so no run reuses another's
prefix cache). The level's figures pool the requests of the runs kept; beside them, each run's
mean TPOT, TTFT and throughput give the spread: median, min-max, spread % of the median and a
verdict. A run far from the median of all runs (`macro.outlier_pct`) is measured once more; if the
new run agrees with the others it replaces the first (listed as discarded), else it is kept and
the level is flagged.
"""

from __future__ import annotations

import statistics
from typing import Any

from tasks.macro.results import RepeatRun, Spread

STABLE_PCT = 5.0
NOISY_PCT = 20.0


def spread(values: list[float | None]) -> Spread:
    """Median and min-max of the runs' values, with a verdict on the spread."""
    known = [v for v in values if v is not None]
    if not known:
        return Spread(runs=0, verdict="not measured")
    median = statistics.median(known)
    low, high = min(known), max(known)
    if len(known) < 2:
        return Spread(runs=1, median=median, low=low, high=high, verdict="one run: no spread")
    pct = (high - low) / median * 100 if median else None
    verdict = "n/a" if pct is None else "stable" if pct <= STABLE_PCT else "noisy" if pct <= NOISY_PCT else "unstable"
    return Spread(runs=len(known), median=median, low=low, high=high, spread_pct=pct, verdict=verdict)


def outliers(values: list[float | None], limit_pct: float) -> list[int]:
    """Indexes of runs further than ``limit_pct`` from the median of all runs (3 runs or more:
    with two, neither can be told from the other)."""
    known = [v for v in values if v is not None]
    if len(known) < 3:
        return []
    median = statistics.median(known)
    return [i for i, v in enumerate(values) if v is not None and median and abs(v - median) / median * 100 > limit_pct]


def agrees(value: float | None, others: list[float | None], limit_pct: float) -> bool:
    known = [v for v in others if v is not None]
    if value is None or not known:
        return False
    median = statistics.median(known)
    return bool(median) and abs(value - median) / median * 100 <= limit_pct


def repeat_run(summary: dict[str, Any], artifact: str, seed: int) -> RepeatRun:
    return RepeatRun(
        seed=seed,
        completed=summary["completed"],
        failed=summary["failed"],
        achieved_request_rate=summary["achieved_request_rate"],
        duration_s=summary["duration_s"],
        tpot_ms_mean=summary["tpot_ms"].get("mean"),
        ttft_ms_mean=summary["ttft_ms"].get("mean"),
        output_throughput_tok_per_s=summary["output_throughput_tok_per_s"],
        artifact=artifact,
    )


def merge_runs(raws: list[dict[str, Any]]) -> dict[str, Any]:
    """One run's shape from several: requests pooled, durations and /metrics deltas summed."""
    delta: dict[str, float] = {}
    for raw in raws:
        for key, value in (raw.get("server_metrics_delta") or {}).items():
            delta[key] = delta.get(key, 0.0) + value
    return {
        "concurrency": raws[0]["concurrency"],
        "requests": [r for raw in raws for r in raw["requests"]],
        "duration_s": sum(raw["duration_s"] for raw in raws),
        "server_metrics_delta": delta,
        "scheduling": raws[0].get("scheduling"),
        "request_rate": raws[0].get("request_rate"),
        "burstiness": raws[0].get("burstiness"),
        "telemetry_runs": [raw.get("telemetry") for raw in raws],
    }


def ranges_overlap(a: Spread, b: Spread) -> bool | None:
    """Whether two spreads' min-max ranges overlap (None without a spread on both sides)."""
    if a.runs < 2 or b.runs < 2 or a.low is None or b.low is None:
        return None
    return not (a.high < b.low or b.high < a.low)
