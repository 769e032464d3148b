"""A campaign's comparable figures (`baseline.json`) and the comparison of two campaigns.

A snapshot holds each headline figure with its noise interval: serving figures from the repeats
(median of the runs' means, min-max), decode-step figures from the trace (mean over steps,
± the 95% interval). Two figures differ beyond the noise when each one lies outside the other's
interval and their difference is wider than either interval. A snapshot is built from a todo file (the results are in it) or read back from a report
folder's `baseline.json`, so `orchestrate compare` takes either.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from orchestrator.errors import InputError
from orchestrator.refs import TaskRef
from orchestrator.report import md_table
from orchestrator.statefile import load_state
from tasks.decisions.decide import decide
from tasks.decisions.estimates import rule_figures
from tasks.decisions.figures import KeyFigures, key_figures
from tasks.decisions.rules import load_rules
from tasks.macro.results import MACRO_CONVERSATIONS, MACRO_REPLAY, LevelSummary, Spread
from tasks.model.results import MODEL_FACTS
from tasks.view import Findings

SNAPSHOT_VERSION = 1


class Measured(BaseModel):
    value: float | None
    low: float | None = None
    high: float | None = None
    unit: str
    noise: str = Field(description="how the interval was measured, or why there is none")


class Snapshot(BaseModel):
    version: int = SNAPSHOT_VERSION
    campaign: str
    source: str
    metrics: dict[str, Measured]
    predictions_ms: dict[str, float | None] = Field(default_factory=dict, description="option id -> predicted gain")
    applied_option: str | None = None


def snapshot(
    figures: KeyFigures,
    campaign: str,
    source: str,
    predictions: dict[str, float | None],
    applied: str | None,
    workloads: dict[str, Measured] | None = None,
) -> Snapshot:
    metrics: dict[str, Measured] = {}
    levels = [("single stream", figures.single.single_stream)] if figures.single else []
    levels += [(f"c={level.concurrency}", level) for level in (figures.sweep.levels if figures.sweep else [])]
    for label, level in levels:
        metrics[f"{label} TPOT mean"] = _serving(level, "tpot_ms_mean", level.tpot_ms.mean, "ms")
        metrics[f"{label} TTFT mean"] = _serving(level, "ttft_ms_mean", level.ttft_ms.mean, "ms")
        metrics[f"{label} output tok/s"] = _serving(
            level, "output_throughput_tok_per_s", level.output_throughput_tok_per_s, "tok/s"
        )
    rank0 = figures.rank0
    if rank0:
        how = "mean over the trace's decode steps ± 95% interval"
        metrics["decode step wall (rank 0)"] = _trace(rank0.wall_ms_per_step, rank0.wall_ms_per_step_ci95, how)
        metrics["decode device work (rank 0)"] = _trace(rank0.device_ms_per_step, rank0.device_ms_per_step_ci95, how)
        for name, category in rank0.categories.items():
            if category.calls_per_step:
                metrics[f"decode {name} (rank 0)"] = _trace(category.ms_per_step, category.ms_per_step_ci95, how)
    return Snapshot(
        campaign=campaign,
        source=source,
        metrics=metrics | (workloads or {}),
        predictions_ms=predictions,
        applied_option=applied,
    )


def workload_metrics(findings: Findings) -> dict[str, Measured]:
    """The trace replay's and the conversations' figures (one run each: no interval)."""
    metrics: dict[str, Measured] = {}
    one = "one run: no interval"
    replayed = findings.result(MACRO_REPLAY)
    if replayed:
        level = replayed.level
        metrics["replay TTFT mean"] = Measured(value=level.ttft_ms.mean, unit="ms", noise=one)
        metrics["replay TPOT mean"] = Measured(value=level.tpot_ms.mean, unit="ms", noise=one)
        metrics["replay achieved req/s"] = Measured(value=replayed.achieved_rate_per_s, unit="req/s", noise=one)
    talks = findings.result(MACRO_CONVERSATIONS)
    if talks:
        metrics["conversations a second"] = Measured(value=talks.conversations_per_s, unit="conv/s", noise=one)
        for turn in talks.by_turn:
            metrics[f"conversation turn {turn.turn} TTFT mean"] = Measured(
                value=turn.ttft_ms.mean, unit="ms", noise=one
            )
            metrics[f"conversation turn {turn.turn} TPOT mean"] = Measured(
                value=turn.tpot_ms.mean, unit="ms", noise=one
            )
            metrics[f"conversation turn {turn.turn} prefix cache served"] = Measured(
                value=turn.cached_pct, unit="%", noise=one
            )
    return metrics


def _serving(level: LevelSummary, attribute: str, pooled: float | None, unit: str) -> Measured:
    spread: Spread | None = getattr(level.noise, attribute) if level.noise else None
    if spread is None or spread.runs < 2:
        return Measured(value=pooled, unit=unit, noise="one run: no interval")
    return Measured(
        value=spread.median,
        low=spread.low,
        high=spread.high,
        unit=unit,
        noise=f"median of {spread.runs} runs' means, min-max",
    )


def _trace(value: float, ci95: float | None, how: str) -> Measured:
    if ci95 is None:
        return Measured(value=value, unit="ms", noise="one step: no interval")
    return Measured(value=value, low=value - ci95, high=value + ci95, unit="ms", noise=how)


def load_snapshot(path: Path) -> Snapshot:
    """A todo file, a report folder (its baseline.json), a state folder, or a baseline.json."""
    candidates = [path / "baseline.json", path / "todo.json", path / "state" / "todo.json"] if path.is_dir() else [path]
    found = next((c for c in candidates if c.is_file()), None)
    if found is None:
        raise InputError(
            f"{path}: no todo.json or baseline.json there; name a campaign's state/todo.json"
            " or its reports/<campaign> folder"
        )
    try:
        document = json.loads(found.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(f"{found}: not readable JSON ({err}); name a todo.json or baseline.json") from None
    if isinstance(document, dict) and "todos" in document:
        return snapshot_of_state(found)
    try:
        return Snapshot.model_validate(document)
    except ValidationError as err:
        raise InputError(
            f"{found}: not a baseline.json of this version ({err.errors()[0]['msg']});"
            " regenerate it with `orchestrate report`, or name the campaign's todo.json"
        ) from None


def _require(path: Path, findings: Findings, ref: TaskRef[Any], why: str) -> None:
    todo = findings.state.by_id().get(ref.id)
    if findings.result(ref) is None:
        status = todo.status.value if todo else "not in the file"
        raise InputError(
            f"{path}: todo '{ref.id}' has no completed result ({status}): {why}; run"
            " `orchestrate resume` on that campaign first, or compare its report's baseline.json"
        )


def snapshot_of_state(path: Path) -> Snapshot:

    state = load_state(path)
    findings = Findings(None, state, path.parent)  # type: ignore[arg-type] - results only
    _require(path, findings, MODEL_FACTS, "what was measured (the model, its TP) is not known")
    figures = key_figures(findings)
    if not (figures.single or figures.sweep or figures.rank0):
        raise InputError(
            f"{path}: no serving benchmark or trace analysis has completed, so there is nothing"
            " to compare; `orchestrate resume` that campaign first"
        )
    rules = load_rules()
    predictions = {o.id: o.gain_ms for o in decide(rule_figures(figures, rules.assumptions), rules)}
    return snapshot(figures, state.campaign, str(path), predictions, None, workload_metrics(findings))


def verdict(a: Measured, b: Measured) -> str:
    if a.value is None or b.value is None:
        return "not measured in both"
    if None in (a.low, a.high, b.low, b.high):
        return "no interval: noise unknown"
    # Outside the noise of both: each figure outside the other's interval, and the difference
    # wider than either interval (two tight but nearby intervals from a few runs are not proof).
    apart = not (a.low <= b.value <= a.high) and not (b.low <= a.value <= b.high)
    wider = abs(b.value - a.value) > max(a.high - a.low, b.high - b.low)
    return "**outside the noise**" if apart and wider else "inside the noise"


def comparison_table(a: Snapshot, b: Snapshot) -> str:
    rows = []
    for name in [*a.metrics, *(n for n in b.metrics if n not in a.metrics)]:
        ma, mb = a.metrics.get(name), b.metrics.get(name)
        if ma is None or mb is None:
            rows.append([name, _cell(ma), _cell(mb), "", "", "in one campaign only"])
            continue
        delta = mb.value - ma.value if ma.value is not None and mb.value is not None else None
        pct = delta / ma.value * 100 if delta is not None and ma.value else None
        rows.append(
            [
                name,
                _cell(ma),
                _cell(mb),
                "n/a" if delta is None else f"{delta:+.4g} {ma.unit}",
                "n/a" if pct is None else f"{pct:+.1f}%",
                verdict(ma, mb),
            ]
        )
    text = md_table(["figure", f"A: {a.campaign}", f"B: {b.campaign}", "B - A", "%", "noise verdict"], rows)
    applied = b.applied_option
    if applied:
        predicted = a.predictions_ms.get(applied)
        tpot_a, tpot_b = a.metrics.get("single stream TPOT mean"), b.metrics.get("single stream TPOT mean")
        realised = (
            tpot_a.value - tpot_b.value if tpot_a and tpot_b and None not in (tpot_a.value, tpot_b.value) else None
        )
        text += (
            f"\nB applied option `{applied}`: A's decision record predicted"
            f" {'n/a' if predicted is None else f'{predicted:+.3f}'} ms of TPOT; realised"
            f" {'n/a' if realised is None else f'{realised:+.3f}'} ms (single-stream TPOT, A - B).\n"
        )
    return text


def _cell(m: Measured | None) -> str:
    if m is None or m.value is None:
        return "n/a"
    if m.low is None or m.high is None:
        return f"{m.value:.4g}"
    return f"{m.value:.4g} [{m.low:.4g}-{m.high:.4g}]"


def comparison_document(a: Snapshot, b: Snapshot) -> str:
    return (
        f"# Comparison: `{a.campaign}` (A) vs `{b.campaign}` (B)\n\nA: `{a.source}`\n\nB: `{b.source}`\n\n"
        "Serving figures: the median of each level's runs with their min-max; decode-step figures: the mean"
        " over the trace's steps ± its 95% interval. A difference is outside the noise when each campaign's"
        " figure lies outside the other's interval and the difference is wider than either interval. The intervals are each campaign's own noise (runs minutes"
        " apart, steps of one capture); a host that drifted between the campaigns (other load, clocks,"
        " thermals) is not in them.\n\n" + comparison_table(a, b)
    )
