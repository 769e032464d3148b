"""The `macro` phase's part of the findings: the serving table, the /metrics cross-check, plots."""

from __future__ import annotations

from orchestrator.report import md_table
from tasks.macro.metrics import DEFINITIONS, goodput
from tasks.macro.noise import ranges_overlap
from tasks.macro.results import (
    MACRO_RATES,
    MACRO_SINGLE,
    MACRO_SLO_SEARCH,
    MACRO_SWEEP,
    LevelSummary,
    MacroRates,
    MacroSingle,
    MacroSweep,
    SloSearch,
    Stalls,
)
from tasks.view import Findings, fmt


def macro_section(findings: Findings) -> str:
    single = findings.result(MACRO_SINGLE)
    sweep = findings.result(MACRO_SWEEP)
    if not single and not sweep:
        return ""
    meta = single or sweep
    text = "## Phase 1: serving benchmarks\n\n"
    text += (
        f"{prompts_text(findings, meta.input_tokens, runs_of(single, sweep))}, {meta.output_tokens}"
        f" output tokens (`ignore_eos`), streamed `{endpoint_of(findings)}`, measured by a client running on"
        " the host next to the server. Definitions (vLLM's `vllm bench serve`):\n\n"
    )
    text += "\n".join(f"- **{k}**: {v}" for k, v in DEFINITIONS.items()) + "\n\n"
    runs: list[tuple[str, LevelSummary]] = [("single stream", single.single_stream)] if single else []
    runs += [(f"c={level.concurrency}", level) for level in (sweep.levels if sweep else [])]
    header = [
        "run",
        "c",
        "ok/failed",
        "req/s",
        "out tok/s",
        "TTFT p50",
        "TTFT p99",
        "TPOT mean",
        "TPOT p50",
        "TPOT p99",
        "ITL p50",
        "ITL p99",
        "E2E p50",
        "stalls",
        "TPOT run means: median [min-max], spread",
        "source",
    ]
    rows = [
        [
            "single stream" if label == "single stream" else "sweep",
            level.concurrency,
            f"{level.completed}/{level.failed}",
            fmt(level.request_throughput_per_s),
            fmt(level.output_throughput_tok_per_s, 1),
            fmt(level.ttft_ms.p50),
            fmt(level.ttft_ms.p99),
            fmt(level.tpot_ms.mean, 3),
            fmt(level.tpot_ms.p50, 3),
            fmt(level.tpot_ms.p99, 3),
            fmt(level.itl_ms.p50, 3),
            fmt(level.itl_ms.p99, 3),
            fmt(level.e2e_ms.p50, 1),
            stall_cell(level.stalls),
            noise_cell(level),
            findings.link(level.artifact, "requests"),
        ]
        for label, level in runs
    ]
    repeats = max((level.noise.tpot_ms_mean.runs for _, level in runs if level.noise), default=1)
    text += (
        f"Latencies in ms; stalls as count (largest, ms). Each row pools the requests of {repeats} runs"
        " (fresh prompts each); the spread column is over the runs' mean TPOT: stable <= 5%, noisy <= 20%,"
        " else unstable.\n\n" + md_table(header, rows)
    )
    text += noise_notes(runs)
    rates = findings.result(MACRO_RATES)
    text += rates_table(rates, findings) if rates else ""
    runs += [(f"{level.request_rate:g} req/s", level) for level in (rates.levels if rates else [])]
    text += goodput_table(runs, findings.session.config.macro if findings.session else None)
    text += percentiles_table(runs, findings.session.config.macro if findings.session else None)
    search = findings.result(MACRO_SLO_SEARCH)
    text += slo_search_table(search) if search else ""
    text += f"\nThe tables as CSV (unrounded): [serving.csv]({write_csv(runs, findings)}).\n"
    text += prefix_cache_text(runs)
    failing = [(label, level) for label, level in runs if level.failed]
    if failing:
        text += (
            "\n**Requests failed** while the server kept answering: "
            + "; ".join(
                f"{label}: {level.failed} of {level.requests} (first: `{(level.failure_examples or ['?'])[0][:120]}`)"
                for label, level in failing
            )
            + ". The figures of those runs describe the requests that"
            " succeeded only.\n"
        )
    cross = [
        [
            label,
            metric,
            fmt(getattr(level, metric).mean, 3),
            fmt(entry.server_mean_ms, 3),
            fmt(entry.client_minus_server_pct) + "%",
        ]
        for label, level in runs
        for metric, entry in level.server.items()
    ]
    apart = [
        label
        for label, level in runs
        if (sched := level.scheduling)
        and sched.autogroup_enabled
        and sched.server_sid is not None
        and sched.server_sid != sched.client_sid
    ]
    if apart:
        text += (
            "\n**The load client ran in another session than the server** ("
            + ", ".join(apart)
            + ") while the kernel groups"
            " scheduling by session (`sched_autogroup_enabled` = 1). On a busy host that was measured"
            " delivering streams in bursts (see the stalls column); a campaign that launches the"
            " server itself runs both in one session.\n"
        )
    if cross:
        text += (
            "\nCross-check against the server's own `/metrics` histograms (delta over each run,"
            " mean = sum/count). The client times bytes at its socket; vLLM's histograms stop at"
            " the engine, so where the stalls column above is not 0 the two views differ by"
            " delivery delays in the API server or the host that the engine never sees (users do;"
            " one between tokens inflates TPOT; one before the first token shows only in TTFT and"
            " shortens TPOT, as the tokens behind it arrive in a burst). Where it is 0 and TTFT"
            " agrees, TPOT should agree within a fraction of a percent:\n\n"
            + md_table(["run", "metric", "client mean ms", "server mean ms", "client - server"], cross)
        )
    if sweep and sweep.levels:
        for name in plot_sweep(sweep.levels, findings):
            text += f"\n![{name}]({name}.png)\n"
    return text


def runs_of(single: MacroSingle | None, sweep: MacroSweep | None) -> list[LevelSummary]:
    return ([single.single_stream] if single else []) + (sweep.levels if sweep else [])


def endpoint_of(findings: Findings) -> str:
    macro = findings.session.config.macro if findings.session else None
    return "/v1/chat/completions" if macro is not None and macro.endpoint == "chat" else "/v1/completions"


def prompts_text(findings: Findings, input_tokens: int, levels: list[LevelSummary]) -> str:
    """What the prompts were, and their length as the server counted it."""
    macro = findings.session.config.macro if findings.session else None
    dataset = macro.dataset if macro is not None else "random"
    counted = [level.prompt_tokens_mean for level in levels if level.prompt_tokens_mean is not None]
    measured = f" (the server counted {sum(counted) / len(counted):.1f} a request)" if counted else ""
    if dataset == "sharegpt":
        return (
            f"Prompts: the first turns of the conversations in `{macro.dataset_path}` (ShareGPT format), at most"
            f" {input_tokens} tokens{measured}; each request asks for its conversation's reply length in output"
            f" tokens, at most {macro.output_tokens} (`ignore_eos`)"
        )
    if dataset == "synthetic" or (macro is not None and macro.endpoint == "chat"):
        return f"Text prompts of {input_tokens} tokens (common words, cut with the model's tokenizer){measured}"
    return f"Random-token prompts of {input_tokens} tokens{measured}"


def prefix_cache_text(runs: list[tuple[str, LevelSummary]]) -> str:
    """Every prompt starts with a unique id, so the prefix cache should serve nothing: the server's
    own counters say whether it did (a hit would flatter TTFT)."""
    measured = [(label, level.prefix_cache_hit_pct) for label, level in runs if level.prefix_cache_hit_pct is not None]
    if not measured:
        return (
            "\nPrefix cache: the server exports no `vllm:prefix_cache_*` counters; prompts start with a unique"
            " id all the same.\n"
        )
    worst_label, worst = max(measured, key=lambda item: item[1])
    text = (
        f"\nPrefix cache: every prompt starts with a unique id, so no request can reuse"
        f" another's prompt; the server's counters (`vllm:prefix_cache_hits` / `queries`) give a hit rate"
        f" of at most {worst:.2f}% of prompt tokens ({worst_label}) over {len(measured)} runs."
    )
    if worst > 1:
        text += (
            " **Above 1%**: the server served prompt tokens from its cache (a warmup or another client"
            " sending the same prompts?); TTFT in those runs is flattered."
        )
    return text + "\n"


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


def goodput_table(runs: list[tuple[str, LevelSummary]], macro) -> str:  # noqa: ANN001 - the [macro] section
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


def noise_notes(runs: list[tuple[str, LevelSummary]]) -> str:
    """Outliers re-measured or flagged, and which differences between neighbouring rows are
    inside the noise (their runs' TPOT ranges overlap)."""
    lines = [f"- {label}: {note}" for label, level in runs if level.noise for note in level.noise.notes]
    differences = []
    for (label_a, a), (label_b, b) in zip(runs, runs[1:], strict=False):
        if not (a.noise and b.noise and a.tpot_ms.mean and b.tpot_ms.mean):
            continue
        overlap = ranges_overlap(a.noise.tpot_ms_mean, b.noise.tpot_ms_mean)
        if overlap is None:
            continue
        change = (b.tpot_ms.mean - a.tpot_ms.mean) / a.tpot_ms.mean * 100
        differences.append(
            f"{label_a} -> {label_b} {change:+.1f}% "
            + ("(inside the noise: the runs' ranges overlap)" if overlap else "(outside the noise)")
        )
    text = ""
    if lines:
        text += "\nRepeats re-measured:\n\n" + "\n".join(lines) + "\n"
    if differences:
        text += "\nMean TPOT from one row to the next: " + "; ".join(differences) + ".\n"
    return text


def stall_cell(stalls: Stalls | None) -> str:
    if not stalls:
        return "-"
    return f"{stalls.count} ({stalls.max_ms:.0f})" if stalls.count else "0"


def plot_sweep(levels: list[LevelSummary], findings: Findings) -> list[str]:
    """Throughput, latency and TTFT against concurrency (plain tick labels at the levels run, the
    runs' min-max as error bars), and the pareto view: tokens/s a user against tokens/s in all."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    conc = [level.concurrency for level in levels]

    def axes(title: str, ylabel: str):  # noqa: ANN202 - matplotlib objects
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.set(xscale="log", xlabel="concurrency", ylabel=ylabel, title=title)
        ax.set_xticks(conc)
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
        return fig, ax

    def save(fig, name: str) -> str:  # noqa: ANN001
        findings.attach_figure(name, fig)
        return name

    def value(v: float | None) -> float:
        return float("nan") if v is None else v

    def bars(attribute: str) -> list[list[float]] | None:
        spreads = [getattr(level.noise, attribute) if level.noise else None for level in levels]
        if not all(s and s.runs > 1 for s in spreads):
            return None
        return [[s.median - s.low for s in spreads], [s.high - s.median for s in spreads]]

    names = []
    fig, ax = axes("Throughput vs concurrency", "output tokens/s")
    spread_bars = bars("output_throughput_tok_per_s")
    if spread_bars:  # each run's throughput: the median, its min-max as the bar
        ax.errorbar(
            conc,
            [level.noise.output_throughput_tok_per_s.median for level in levels],
            yerr=spread_bars,
            marker="o",
            capsize=3,
            label="median of the runs, min-max",
        )
        ax.legend()
    else:
        ax.plot(conc, [value(level.output_throughput_tok_per_s) for level in levels], marker="o")
    names.append(save(fig, "throughput"))
    fig, ax = axes("Latency percentiles", "ms")
    for metric in ("tpot_ms", "itl_ms"):
        for pct, style in (("p50", "-"), ("p99", "--")):
            ax.plot(
                conc,
                [value(getattr(getattr(level, metric), pct)) for level in levels],
                style,
                marker="o",
                label=f"{metric[:-3].upper()} {pct}",
            )
    ax.legend()
    names.append(save(fig, "latency"))
    fig, ax = axes("Time to first token", "ms")
    for pct, style in (("p50", "-"), ("p99", "--")):
        ax.plot(conc, [value(getattr(level.ttft_ms, pct)) for level in levels], style, marker="o", label=f"TTFT {pct}")
    ax.legend()
    names.append(save(fig, "ttft"))
    fig, ax = plt.subplots(figsize=(6, 4))
    total = [value(level.output_throughput_tok_per_s) for level in levels]
    per_user = [1000 / level.tpot_ms.mean if level.tpot_ms.mean else float("nan") for level in levels]
    ax.plot(total, per_user, marker="o")
    for c, x, y in zip(conc, total, per_user, strict=True):
        ax.annotate(f"c={c}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set(
        xlabel="output tokens/s, all users",
        ylabel="output tokens/s a user (1000 / mean TPOT)",
        title="Per-user vs total throughput",
    )
    names.append(save(fig, "pareto"))
    return names


def percentiles_table(runs: list[tuple[str, LevelSummary]], macro) -> str:  # noqa: ANN001 - the [macro] section
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
