"""The findings' energy table: power, clocks and throttling of each measured run, joules a request
and output tokens a joule; and a plot of power and SM clock over the campaign's runs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.report import md_table
from tasks.macro.energy import Telemetry
from tasks.view import Findings, fmt


@dataclass(frozen=True)
class EnergyRun:
    """A measured run as the energy table reads it."""

    label: str
    telemetry: Telemetry | None
    completed: int
    output_tokens: int
    artifact: str | None = None  # the stored requests file, whose samples the plot draws


def energy_cells(telemetry: Telemetry, completed: int, output_tokens: int) -> list[str]:
    energy, how = telemetry.energy
    agree = (
        f"{(telemetry.energy_j_from_power / telemetry.energy_j - 1) * 100:+.1f}%"
        if telemetry.energy_j and telemetry.energy_j_from_power is not None
        else "n/a"
    )
    slowdowns = ", ".join(f"{name} {pct:.0f}%" for name, pct in sorted(telemetry.slowdowns.items())) or "none"
    return [
        f"{fmt(telemetry.power_w_mean, 1)} / {fmt(telemetry.power_w_peak, 1)}",
        f"{fmt(energy, 1)} ({how})",
        agree,
        fmt(energy / completed, 2) if energy and completed else "n/a",
        fmt(output_tokens / energy, 2) if energy else "n/a",
        f"{fmt(telemetry.sm_mhz_mean, 0)} / {fmt(telemetry.sm_mhz_min, 0)}",
        fmt(telemetry.temp_c_max, 0),
        fmt(telemetry.util_pct_mean, 0),
        slowdowns,
    ]


HEADER = [
    "run",
    "mean / peak W",
    "energy J",
    "mean W x time vs counter",
    "J a request",
    "output tokens a J",
    "SM MHz mean / min",
    "max °C",
    "util %",
    "throttled (% of samples)",
]


def energy_table(runs: list[EnergyRun], findings: Findings) -> str:
    sampled = [run for run in runs if run.telemetry is not None]
    if not sampled:
        return ""
    measured = [run for run in sampled if run.telemetry.source]
    if not measured:
        return (
            f"\n**Energy**: nothing measured on this host ({sampled[0].telemetry.why_none}); no power or energy"
            " figure is given rather than a zero.\n"
        )
    first = measured[0].telemetry
    rows = [[run.label, *energy_cells(run.telemetry, run.completed, run.output_tokens)] for run in measured]
    text = (
        f"\n**Energy** (`[macro] telemetry_interval_s` = {first.interval_s:g} s, source {first.source}:"
        f" {', '.join(sorted(set(first.devices))) or 'unnamed'}, {len(first.devices)} device(s), summed):"
        " sampled from a process of its own over each measured run only. Energy is the board's own"
        " counter's difference where it has one, else mean power x the run's time; the column beside it is"
        " how far mean power x time lies from the counter (the sampling's check). Output tokens a joule and"
        " joules a request divide the run's completed output tokens and requests by that energy. Throttled:"
        " the clock-event reasons other than idle, % of samples with any device so limited.\n\n"
        + md_table(HEADER, rows)
    )
    throttled = [(run.label, run.telemetry.slowdowns) for run in measured if run.telemetry.slowdowns]
    if throttled:
        text += (
            "\n**Throttled runs**: "
            + "; ".join(f"{label}: {', '.join(sorted(reasons))}" for label, reasons in throttled)
            + ". A slower level there may be the hardware holding clocks down, not the load.\n"
        )
    lost = [(run.label, run.telemetry) for run in measured if run.telemetry.samples_lost]
    if lost:
        text += (
            "\n**Samples the source could not read** (left out of the means; the energy counter is unaffected): "
            + "; ".join(f"{label}: {t.samples_lost} of {t.samples + t.samples_lost}" for label, t in lost)
            + f" (first: {lost[0][1].sample_error}).\n"
        )
    plot = power_plot(findings, measured)
    return text + (f"\n![power and SM clock over the runs]({plot})\n" if plot else "")


def _series(artifact: str | None) -> list[tuple[list[float], list[float], list[float]]]:
    """Each run's (seconds, total W, mean SM MHz) from a level's stored requests file."""
    if not artifact or not Path(artifact).is_file():
        return []
    document: dict[str, Any] = json.loads(Path(artifact).read_text())
    runs = document.get("telemetry_runs") or [document.get("telemetry")]
    found = []
    for run in runs:
        if not run or not run.get("source") or not run.get("samples"):
            continue
        power = run["fields"].index("power_w")
        sm = run["fields"].index("sm_mhz")
        times, watts, clocks = [], [], []
        for t, rows in run["samples"]:
            if rows and all(r[power] is not None for r in rows):
                times.append(t)
                watts.append(sum(r[power] for r in rows))
                sm_values = [r[sm] for r in rows if r[sm] is not None]
                clocks.append(sum(sm_values) / len(sm_values) if sm_values else float("nan"))
        found.append((times, watts, clocks))
    return found


def power_plot(findings: Findings, runs: list[EnergyRun]) -> str | None:
    """Power (and SM clock, where known) over the runs laid end to end, each level labelled."""
    series = [(run.label, _series(run.artifact)) for run in runs]
    if not any(runs for _, runs in series):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, power_axis = plt.subplots(figsize=(10, 4))
    clock_axis = power_axis.twinx()
    offset = 0.0
    for label, runs in series:
        start = offset
        for times, watts, clocks in runs:
            power_axis.plot([offset + t for t in times], watts, color="tab:red", linewidth=1)
            clock_axis.plot([offset + t for t in times], clocks, color="tab:blue", linewidth=0.8, alpha=0.6)
            offset += (times[-1] if times else 0.0) + 0.5
        power_axis.axvline(start, color="grey", linewidth=0.5)
        power_axis.text(start, 1.01, label, fontsize=7, transform=power_axis.get_xaxis_transform(), va="bottom")
    power_axis.set_xlabel("seconds of measured runs, laid end to end")
    power_axis.set_ylabel("power W (all devices)", color="tab:red")
    clock_axis.set_ylabel("SM clock MHz (mean over devices)", color="tab:blue")
    fig.tight_layout()
    return findings.attach_figure("power", fig)
