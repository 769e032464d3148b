"""The highest request rate that still meets the SLOs: a bracketing search, each point kept.

From `macro.slo_search_start_rate`, the rate doubles while a point meets the SLOs and halves
while the first ones miss; once a point meets and a higher one misses, the search bisects
between them. At most `macro.slo_search_runs` points, one run each (the runs are the budget).
A point meets the SLOs when at least `macro.slo_met_pct` % of its requests meet every SLO set
and none failed.
"""

from __future__ import annotations

from orchestrator.campaign import TaskContext
from orchestrator.errors import TaskFailed
from tasks.macro.action import run_load
from tasks.macro.metrics import goodput
from tasks.macro.results import LevelSummary, SearchPoint, SloSearch
from tasks.session import Session


def met_pct(level: LevelSummary, macro) -> float:  # the [macro] section
    met, _ = goodput(level.latencies or [], level.duration_s, macro.slo_ttft_ms, macro.slo_tpot_ms, macro.slo_e2e_ms)
    return met / level.requests * 100 if level.requests else 0.0


def next_rate(points: list[SearchPoint]) -> float:
    """Double or halve until the SLO boundary is bracketed, then bisect the bracket."""
    meets = [p.rate for p in points if p.meets]
    misses = [p.rate for p in points if not p.meets]
    low, high = max(meets, default=None), min((r for r in misses if not meets or r > max(meets)), default=None)
    if high is None:
        return low * 2
    if low is None:
        return high / 2
    return (low + high) / 2


def slo_search(session: Session):
    def run(ctx: TaskContext) -> SloSearch:
        cfg = session.config.macro
        if not (cfg.slo_ttft_ms or cfg.slo_tpot_ms or cfg.slo_e2e_ms):
            raise TaskFailed("macro.slo_search needs an SLO: set slo_ttft_ms, slo_tpot_ms or slo_e2e_ms")
        points: list[SearchPoint] = []
        rate = cfg.slo_search_start_rate
        for index in range(cfg.slo_search_runs):
            level = run_load(
                session,
                ctx,
                cfg.rate_max_concurrency,
                max(cfg.requests_per_level, 2),
                warmup=1 if not points else 0,
                seed=700 + index,
                rate=rate,
                repeats=1,
            )
            share = met_pct(level, cfg)
            points.append(
                SearchPoint(rate=rate, meets=share >= cfg.slo_met_pct and not level.failed, met_pct=share, level=level)
            )
            ctx.log(
                f"SLO search: {rate:g} req/s asked, {share:.1f}% met -> {'meets' if points[-1].meets else 'misses'}"
            )
            rate = next_rate(points)
        meets = [p.rate for p in points if p.meets]
        best = max(meets, default=None)
        above = [p.rate for p in points if not p.meets and (best is None or p.rate > best)]
        return SloSearch(
            points=points,
            best_rate=best,
            next_missing_rate=min(above, default=None),
            slo_met_pct=cfg.slo_met_pct,
            slo_ttft_ms=cfg.slo_ttft_ms,
            slo_tpot_ms=cfg.slo_tpot_ms,
            slo_e2e_ms=cfg.slo_e2e_ms,
        )

    return run
