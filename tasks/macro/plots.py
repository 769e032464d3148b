"""The serving section's plots: throughput, latency and TTFT against concurrency, and per-user against total throughput."""

from __future__ import annotations

from tasks.macro.results import (
    LevelSummary,
)
from tasks.macro.tables import (  # noqa: F401
    CSV_COLUMNS,
    goodput_table,
    noise_cell,
    percentiles_table,
    rates_table,
    slo_search_table,
    stall_cell,
    write_csv,
)
from tasks.view import Findings


def plot_sweep(levels: list[LevelSummary], findings: Findings) -> list[str]:
    """Throughput, latency and TTFT against concurrency (plain tick labels at the levels run, the
    runs' min-max as error bars), and the pareto view: tokens/s a user against tokens/s in all."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    conc = [level.concurrency for level in levels]

    def axes(title: str, ylabel: str):  # matplotlib objects
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.set(xscale="log", xlabel="concurrency", ylabel=ylabel, title=title)
        ax.set_xticks(conc)
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
        return fig, ax

    def save(fig, name: str) -> str:
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
