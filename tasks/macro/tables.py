"""The serving section's tables and its CSV: request rates, goodput under the SLOs, the SLO search, every run's figures unrounded."""

from __future__ import annotations

from pathlib import Path

from orchestrator.report import md_table
from tasks.macro.metrics import goodput
from tasks.macro.results import (
    LevelSummary,
    MacroConversations,
    MacroRates,
    MacroReplay,
    SloSearch,
    Stalls,
)
from tasks.view import Findings, fmt

CSV_COLUMNS = (
    "concurrency",
    "request_rate",
    "achieved_request_rate",
    "burstiness",
    "requests",
    "completed",
    "failed",
    "duration_s",
    "request_throughput_per_s",
    "output_throughput_tok_per_s",
)


def rates_table(rates: MacroRates, findings: Findings) -> str:
    """Open-loop levels: the rate asked and the rate the client sent at (each run's, median)."""
    rows = [
        [
            f"{level.request_rate:g}",
            fmt(level.achieved_request_rate, 2),
            fmt(level.burstiness, 2),
            f"{level.completed}/{level.failed}",
            fmt(level.request_throughput_per_s),
            fmt(level.output_throughput_tok_per_s, 1),
            fmt(level.ttft_ms.p50),
            fmt(level.ttft_ms.p99),
            fmt(level.tpot_ms.mean, 3),
            fmt(level.tpot_ms.p99, 3),
            fmt(level.e2e_ms.p50, 1),
            fmt(level.e2e_ms.p99, 1),
            noise_cell(level),
            findings.link(level.artifact, "requests"),
        ]
        for level in rates.levels
    ]
    return (
        "\nOpen-loop request rates: arrivals due at gamma-distributed gaps (burstiness = the gamma shape, 1 is"
        " Poisson), scaled so each run asks for exactly the rate; sent = (requests - 1) / (last send - first"
        " send), the runs' median; a request due while the in-flight cap is reached waits.\n\n"
        + md_table(
            [
                "asked req/s",
                "sent req/s",
                "burstiness",
                "ok/failed",
                "done req/s",
                "out tok/s",
                "TTFT p50",
                "TTFT p99",
                "TPOT mean",
                "TPOT p99",
                "E2E p50",
                "E2E p99",
                "TPOT run means",
                "source",
            ],
            rows,
        )
    )


def goodput_table(runs: list[tuple[str, LevelSummary]], macro) -> str:  # the [macro] section
    """Requests meeting every SLO set in [macro], and those a second of the runs (vLLM bench's goodput),
    from each request's stored latencies: changing an SLO needs no new measurement."""
    slos = {
        "TTFT": getattr(macro, "slo_ttft_ms", None),
        "TPOT": getattr(macro, "slo_tpot_ms", None),
        "E2E": getattr(macro, "slo_e2e_ms", None),
    }
    if not any(slos.values()):
        return ""
    rows = []
    for label, level in runs:
        if level.latencies is None:
            rows.append([label, "n/a", "n/a", "n/a"])
            continue
        met, per_s = goodput(level.latencies, level.duration_s, slos["TTFT"], slos["TPOT"], slos["E2E"])
        rows.append(
            [
                label,
                f"{met}/{level.completed}",
                fmt(met / level.completed * 100 if level.completed else None, 1),
                fmt(per_s, 2),
            ]
        )
    said = ", ".join(f"{k} <= {v:g} ms" for k, v in slos.items() if v)
    return (
        f"\nGoodput under the SLOs {said} (every one set must hold; a one-token request has no TPOT):\n\n"
        + md_table(["run", "met / completed", "met %", "goodput req/s"], rows)
    )


def slo_search_table(search: SloSearch) -> str:
    said = ", ".join(
        f"{k} <= {v:g} ms"
        for k, v in (("TTFT", search.slo_ttft_ms), ("TPOT", search.slo_tpot_ms), ("E2E", search.slo_e2e_ms))
        if v
    )
    rows = [
        [
            i,
            f"{p.rate:g}",
            fmt(p.level.achieved_request_rate, 2),
            fmt(p.met_pct, 1),
            f"{p.level.completed}/{p.level.failed}",
            fmt(p.level.ttft_ms.p99),
            fmt(p.level.tpot_ms.p99, 3),
            "meets" if p.meets else "misses",
        ]
        for i, p in enumerate(search.points, 1)
    ]
    best = (
        f"**{search.best_rate:g} requests/s** is the highest rate that met them"
        + (
            f"; {search.next_missing_rate:g} missed, so the capacity lies between (one search step)"
            if search.next_missing_rate
            else "; no higher rate was tried"
        )
        if search.best_rate
        else "no rate tried met them"
    )
    return (
        f"\nSLO search ({said}; a rate meets them when {search.slo_met_pct:g}% of its requests do and none"
        f" failed; doubling, then bisecting, one run a point): {best}.\n\n"
        + md_table(["#", "asked req/s", "sent req/s", "met %", "ok/failed", "TTFT p99", "TPOT p99", "verdict"], rows)
    )


def write_csv(runs: list[tuple[str, LevelSummary]], findings: Findings) -> str:
    """The serving table unrounded, one row a run, for a spreadsheet."""
    import csv
    import io

    out = io.StringIO()
    writer = csv.writer(out)
    metrics = [(m, p) for m in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms") for p in ("mean", "p50", "p90", "p99")]
    writer.writerow(
        [
            "run",
            *CSV_COLUMNS,
            *(f"{m}_{p}" for m, p in metrics),
            "tpot_run_means_low",
            "tpot_run_means_high",
            "tpot_spread_pct",
            "stalls",
        ]
    )
    for label, level in runs:
        tpot = level.noise.tpot_ms_mean if level.noise else None
        writer.writerow(
            [
                label,
                *(getattr(level, c) for c in CSV_COLUMNS),
                *(getattr(getattr(level, m), p) for m, p in metrics),
                tpot.low if tpot else None,
                tpot.high if tpot else None,
                tpot.spread_pct if tpot else None,
                level.stalls.count,
            ]
        )
    return findings.attach("serving.csv", out.getvalue().encode())


def noise_cell(level: LevelSummary) -> str:
    noise = level.noise
    if noise is None:
        return "one run"
    tpot = noise.tpot_ms_mean
    if tpot.runs < 2:
        return tpot.verdict
    cell = f"{tpot.median:.3f} [{tpot.low:.3f}-{tpot.high:.3f}], {tpot.spread_pct:.1f}% {tpot.verdict}"
    return f"**{cell}; outlier flagged**" if noise.flagged else cell


def stall_cell(stalls: Stalls | None) -> str:
    if not stalls:
        return "-"
    return f"{stalls.count} ({stalls.max_ms:.0f})" if stalls.count else "0"


def percentiles_table(runs: list[tuple[str, LevelSummary]], macro) -> str:  # the [macro] section
    """`macro.percentiles` of TTFT, TPOT and E2E for every run, from the stored per-request
    latencies (so a new list needs no new run); shown when it asks for more than p50 and p99."""
    from tasks.macro.metrics import percentile

    wanted = sorted(set(macro.percentiles)) if macro is not None else []
    if not wanted or set(wanted) <= {50.0, 99.0}:
        return ""
    header = ["run"] + [f"{metric} p{p:g}" for metric in ("TTFT", "TPOT", "E2E") for p in wanted]
    rows = []
    for label, level in runs:
        if not level.latencies:
            continue
        columns = [sorted(v for v in values if v is not None) for values in zip(*level.latencies, strict=True)]
        rows.append(
            [label] + [fmt(percentile(values, p / 100), 3) if values else "-" for values in columns for p in wanted]
        )
    if not rows:
        return ""
    return (
        "\nPercentiles asked for (`macro.percentiles`; ms, linear between order statistics as vLLM bench):\n\n"
        + md_table(header, rows)
    )


def replay_table(replayed: MacroReplay) -> str:
    """The trace replay beside the trace: its rate and the achieved one, how late the sends were,
    and the latencies under it."""
    level = replayed.level
    achieved = replayed.achieved_rate_per_s
    ratio = (
        f" ({(achieved / replayed.trace_rate_per_s - 1) * 100:+.1f}% of the trace's)"
        if achieved and replayed.trace_rate_per_s
        else ""
    )
    rows = [
        [
            Path(replayed.trace).name,
            replayed.format,
            replayed.arrivals,
            f"{replayed.span_s:.1f}",
            f"{replayed.speed:g}",
            fmt(replayed.trace_rate_per_s, 3),
            fmt(achieved, 3) + ratio,
            f"{fmt(replayed.lateness_ms.p50, 1)} / {fmt(replayed.lateness_ms.p99, 1)}",
            f"{level.completed}/{level.failed}",
            f"{fmt(level.ttft_ms.p50)} / {fmt(level.ttft_ms.p99)}",
            f"{fmt(level.tpot_ms.p50)} / {fmt(level.tpot_ms.p99)}",
            "n/a" if level.prefix_cache_hit_pct is None else f"{level.prefix_cache_hit_pct:.1f}",
            "n/a" if replayed.shared_block_pct is None else f"{replayed.shared_block_pct:.1f}",
        ]
    ]
    header = [
        "trace",
        "format",
        "arrivals",
        "span s",
        "speed",
        "trace req/s",
        "achieved req/s",
        "late ms p50 / p99",
        "ok/failed",
        "TTFT ms p50 / p99",
        "TPOT ms p50 / p99",
        "prefix cache hit %",
        "trace's shared blocks %",
    ]
    return (
        "\n**Trace replay** (`[macro] trace`): each arrival sent at its offset in the trace (divided by"
        " `trace_speed`), with the trace's prompt and reply lengths (random prompt tokens); at most"
        " `rate_max_concurrency` in flight. Achieved: (sent − 1) over the first to last send; late: each"
        " send after its scheduled time. The prefix cache's hit rate is vLLM's own counters' difference over"
        " the replay; the trace's shared blocks (Mooncake's hash ids) are what a cache could serve at best.\n\n"
        + md_table(header, rows)
    )


def conversations_table(talks: MacroConversations) -> str:
    """The conversations by turn number: what turn 1 pays, what later turns find in the cache."""
    level = talks.level
    rows = [
        [
            turn.turn,
            f"{turn.completed}/{turn.requests - turn.completed}",
            fmt(turn.prompt_tokens_mean, 1),
            "n/a" if turn.cached_pct is None else f"{turn.cached_pct:.1f}",
            f"{fmt(turn.ttft_ms.p50)} / {fmt(turn.ttft_ms.p99)}",
            f"{fmt(turn.tpot_ms.p50)} / {fmt(turn.tpot_ms.p99)}",
        ]
        for turn in talks.by_turn
    ]
    header = ["turn", "ok/failed", "prompt tokens", "prefix cache served %", "TTFT ms p50 / p99", "TPOT ms p50 / p99"]
    counters = (
        "n/a (the server exports no prefix-cache counters)"
        if level.prefix_cache_hit_pct is None
        else f"{level.prefix_cache_hit_pct:.1f}%"
    )
    return (
        f"\n**Multi-turn conversations** (`[macro] conversations`, user messages {talks.source}):"
        f" {talks.finished} of {talks.conversations} conversations of {talks.turns} turns finished,"
        f" {talks.concurrency} in flight, {talks.think_time_s:g} s of think time between turns;"
        f" {fmt(talks.conversations_per_s, 3)} conversations a second (finished over the run's"
        f" {level.duration_s:.1f} s), {fmt(level.output_throughput_tok_per_s, 1)} output tokens a second."
        " Turn n sends the whole history (each user message and the model's own answer) and a new message."
        " Prefix cache served: the prompt tokens each response's usage says came from vLLM's prefix cache"
        " (`prompt_tokens_details.cached_tokens`), % of the turn's prompt tokens; over all turns, vLLM's own"
        f" counters' difference gives {counters}. vLLM caches whole blocks only (128 tokens on CPU), so a"
        " history shorter than a block is computed again.\n\n" + md_table(header, rows)
    )
