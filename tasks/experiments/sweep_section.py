"""The findings' "Server-parameter sweep" section: every grid point's levels as measured, the
Pareto front (tokens/s a user against tokens/s a GPU, and against output tokens a joule where the
host's telemetry measured energy), the points the decision rules can predict
beside them, and the best point under the campaign's SLOs.

Tokens/s a user is 1000 / the level's TPOT (the median of its runs' mean TPOT, vLLM's definition);
tokens/s a GPU is the level's output throughput / the point's tensor-parallel size (a rank on a CPU
host). A level meets the SLOs when `macro.slo_met_pct` of its requests meet every SLO set
(vLLM bench's goodput, from each request's stored latencies).
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.report import md_table
from tasks.decisions.estimates import rule_figures
from tasks.decisions.figures import KeyFigures, key_figures
from tasks.decisions.formula import evaluate
from tasks.experiments.config import Experiment
from tasks.experiments.plan import experiments_run
from tasks.experiments.verify import variant_findings
from tasks.macro.metrics import goodput
from tasks.macro.results import LevelSummary
from tasks.view import Findings, fmt


@dataclass
class Point:
    """One level of one server configuration, as served."""

    label: str
    params: str
    gpus: int
    concurrency: int
    tpot_ms: float | None
    ttft_p99_ms: float | None
    out_tok_s: float | None
    slo_met_pct: float | None
    tok_per_j: float | None = None
    """Output tokens a joule where the host's telemetry measured the level's energy."""

    @property
    def per_user(self) -> float | None:
        return 1000 / self.tpot_ms if self.tpot_ms else None

    @property
    def per_gpu(self) -> float | None:
        return self.out_tok_s / self.gpus if self.out_tok_s is not None else None


def grids(findings: Findings) -> dict[str, list[Experiment]]:
    """Grid name -> its points whose todos are in the todo file, in order."""
    out: dict[str, list[Experiment]] = {}
    for experiment in experiments_run(findings):
        if experiment.grid:
            out.setdefault(experiment.grid, []).append(experiment)
    return out


def _levels(figures: KeyFigures) -> list[LevelSummary]:
    if figures.sweep and figures.sweep.levels:
        return list(figures.sweep.levels)
    return [figures.single.single_stream] if figures.single else []


def points_of(findings: Findings, figures: KeyFigures, label: str, params: str, gpus: int) -> list[Point]:
    macro = findings.session.config.macro
    slos = (macro.slo_ttft_ms, macro.slo_tpot_ms, macro.slo_e2e_ms)
    out = []
    for level in _levels(figures):
        noise = level.noise
        tpot = noise.tpot_ms_mean.median if noise and noise.tpot_ms_mean.median is not None else level.tpot_ms.mean
        rate = (
            noise.output_throughput_tok_per_s.median
            if noise and noise.output_throughput_tok_per_s.median is not None
            else level.output_throughput_tok_per_s
        )
        met = None
        if any(slos) and level.latencies:
            met = goodput(level.latencies, level.duration_s, *slos)[0] / len(level.latencies) * 100
        energy = level.telemetry.energy[0] if level.telemetry else None
        per_joule = level.output_tokens / energy if energy else None
        out.append(Point(label, params, gpus, level.concurrency, tpot, level.ttft_ms.p99, rate, met, per_joule))
    return out


def pareto(points: list[Point], axis: str = "per_gpu") -> list[Point]:
    """The points no other point beats on both tokens/s a user and ``axis`` (tokens/s a GPU, or
    `tok_per_j`: output tokens a joule)."""
    known = [p for p in points if p.per_user is not None and getattr(p, axis) is not None]
    return sorted(
        (
            p
            for p in known
            if not any(
                q.per_user >= p.per_user
                and getattr(q, axis) >= getattr(p, axis)
                and (q.per_user, getattr(q, axis)) != (p.per_user, getattr(p, axis))
                for q in known
            )
        ),
        key=lambda p: p.per_user or 0,
    )


def predicted_point(
    findings: Findings, base: KeyFigures, experiment: Experiment, rules: object, tp: int
) -> tuple[float, float] | None:
    """(tokens/s a user, tokens/s a GPU) at c=1 where a decision rule predicts the point: n-gram
    speculative decoding with k draft tokens, or half the TP; None for any other parameter."""

    params = dict(experiment.point)
    if set(params) == {"num_speculative_tokens"} and int(params["num_speculative_tokens"]) > 0:
        option, update = "speculative_decoding", {"spec_tokens": float(params["num_speculative_tokens"])}
    elif set(params) == {"tensor_parallel"} and int(params["tensor_parallel"]) * 2 == tp:
        option, update = "lower_tp", {}
    else:
        return None
    spec = rules.specs.get(option)  # type: ignore[attr-defined]
    figures = rule_figures(base, rules.assumptions | update)  # type: ignore[attr-defined]
    gain = evaluate(spec.gain_ms, figures) if spec else None
    tpot = figures.get("tpot_ms")
    if gain is None or not tpot or tpot - gain <= 0:
        return None
    per_user = 1000 / (tpot - gain)
    return per_user, per_user / int(params.get("tensor_parallel", tp))


def sweep_section(findings: Findings, rules: object) -> str:
    found = grids(findings)
    if not found:
        return ""

    tp = findings.session.config.service.tensor_parallel
    base = key_figures(findings)
    macro = findings.session.config.macro
    slo_text = ", ".join(
        f"{name} ≤ {value:g} ms"
        for name, value in (("TTFT", macro.slo_ttft_ms), ("TPOT", macro.slo_tpot_ms), ("E2E", macro.slo_e2e_ms))
        if value
    )
    text = (
        "## Server-parameter sweep\n\nEach grid point is a variant server (one model load) served as the"
        " campaign is. Tokens/s a user: 1000 / TPOT (the median of the runs' mean TPOT); tokens/s a GPU:"
        " output throughput / the point's TP (a rank on a CPU host); output tokens a joule: the level's output"
        " tokens over its energy (the host's telemetry; n/a where nothing was measured), with its own Pareto"
        " front against tokens/s a user."
        + (
            f" SLOs: {slo_text}, met when {macro.slo_met_pct:g}% of a level's requests meet them."
            if slo_text
            else " No SLO is set ([macro] slo_ttft_ms / slo_tpot_ms / slo_e2e_ms): the best point is by"
            " throughput alone."
        )
        + "\n"
    )
    for name, experiments in found.items():
        points = points_of(findings, base, "campaign", "as configured", tp)
        predicted: list[tuple[str, tuple[float, float]]] = []
        for experiment in experiments:
            params = ", ".join(f"{k} = {v}" for k, v in experiment.point)
            gpus = experiment.change.tensor_parallel or tp
            points += points_of(
                findings, key_figures(variant_findings(findings, experiment)), experiment.name, params, gpus
            )
            guess = predicted_point(findings, base, experiment, rules, tp)
            if guess:
                predicted.append((experiment.name, guess))
        front = pareto(points)
        energy_front = pareto(points, "tok_per_j")
        rows = [
            [
                p.label,
                p.params,
                str(p.gpus),
                str(p.concurrency),
                fmt(p.tpot_ms, 3),
                fmt(p.ttft_p99_ms, 1),
                fmt(p.out_tok_s, 1),
                fmt(p.per_user, 1),
                fmt(p.per_gpu, 1),
                "n/a" if p.slo_met_pct is None else f"{p.slo_met_pct:.0f}%",
                "yes" if p in front else "",
                fmt(p.tok_per_j, 2),
                "yes" if p in energy_front else "",
            ]
            for p in points
        ]
        text += f"\n### Grid `{name}`\n\n" + md_table(
            [
                "point",
                "parameters",
                "GPUs",
                "c",
                "TPOT ms",
                "TTFT p99 ms",
                "out tok/s",
                "tok/s a user",
                "tok/s a GPU",
                "requests meeting the SLOs",
                "Pareto",
                "out tok a J",
                "Pareto (a user, a J)",
            ],
            rows,
        )
        text += _best(points, macro.slo_met_pct if slo_text else None)
        measured_c1 = {p.label: p for p in points if p.concurrency == 1}
        if predicted:
            text += (
                "\nPredicted by the decision rules at c=1 (the record's figures, the point's parameter in place"
                " of the assumption), beside the measured:\n\n"
                + md_table(
                    ["point", "predicted tok/s a user", "measured tok/s a user", "predicted / measured"],
                    [
                        [
                            label,
                            fmt(guess[0], 1),
                            fmt(getattr(measured_c1.get(label), "per_user", None), 1),
                            _ratio(guess[0], getattr(measured_c1.get(label), "per_user", None)),
                        ]
                        for label, guess in predicted
                    ],
                )
            )
        others = [e.name for e in experiments if e.name not in {label for label, _ in predicted}]
        if others:
            text += (
                f"\nNo decision rule predicts {', '.join(others)} (only n-gram draft tokens alone and half"
                " the TP alone have a formula): measured only.\n"
            )
        plot = _plot(findings, name, points, front, predicted)
        if plot:
            text += f"\n![Pareto: grid {name}]({plot}.png)\n"
    return text


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a is not None and b else "n/a"


def _best(points: list[Point], met_pct: float | None) -> str:
    eligible = [p for p in points if p.per_gpu is not None and (met_pct is None or (p.slo_met_pct or 0) >= met_pct)]
    if not eligible:
        return "\nNo level of any point meets the SLOs.\n"
    best = max(eligible, key=lambda p: p.per_gpu or 0)
    where = "meeting the SLOs" if met_pct is not None else "of all (no SLO set)"
    return (
        f"\nBest point {where}: **{best.label}** ({best.params}) at c={best.concurrency}:"
        f" {fmt(best.per_gpu, 1)} tokens/s a GPU, {fmt(best.per_user, 1)} tokens/s a user.\n"
    )


def _plot(
    findings: Findings,
    name: str,
    points: list[Point],
    front: list[Point],
    predicted: list[tuple[str, tuple[float, float]]],
) -> str | None:
    known = [p for p in points if p.per_user is not None and p.per_gpu is not None]
    if not known:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for label in dict.fromkeys(p.label for p in known):
        mine = sorted((p for p in known if p.label == label), key=lambda p: p.concurrency)
        ax.plot([p.per_user for p in mine], [p.per_gpu for p in mine], marker="o", label=f"{label} (measured)")
    ax.plot([p.per_user for p in front], [p.per_gpu for p in front], "k--", linewidth=1, label="Pareto front")
    for label, (per_user, per_gpu) in predicted:
        ax.scatter([per_user], [per_gpu], facecolors="none", edgecolors="k", s=60)
        ax.annotate(f"{label} predicted", (per_user, per_gpu), fontsize=7, xytext=(4, 4), textcoords="offset points")
    ax.set(xlabel="tokens/s a user (1000 / TPOT)", ylabel="tokens/s a GPU", title=f"Grid {name}: measured points")
    ax.legend(fontsize=7)
    stem = f"pareto_{name}"
    findings.attach_figure(stem, fig)
    return stem
