"""The closing sections: the decision record, the baseline, and the configuration the results
came from (as each todo recorded it, with any that a later config change made stale)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator.report import md_table
from orchestrator.results import stale_reason
from orchestrator.schema import Status
from tasks.decisions.decide import Option
from tasks.decisions.estimates import rule_figures
from tasks.decisions.figures import KeyFigures
from tasks.decisions.formula import evaluate, fmt_figure, fmt_ms, value_for
from tasks.decisions.ledger import ledger_history
from tasks.decisions.record import predictions_by_level
from tasks.decisions.rules import Rules
from tasks.decisions.vocabulary import DERIVED_FROM_ASSUMPTIONS, MEASURED_IN_PLACE, SETTING, measured_by, provenance
from tasks.synthesis.snapshot import comparison_table, load_snapshot, snapshot, workload_metrics
from tasks.view import Findings, fmt

ASSUMPTION_USERS = {
    assumption: tuple(name for name, sources in DERIVED_FROM_ASSUMPTIONS.items() if assumption in sources)
    for assumption in {source for sources in DERIVED_FROM_ASSUMPTIONS.values() for source in sources}
}
"""Figures computed from an assumption: an option reading them depends on the assumption too."""


def sensitivity(figures: KeyFigures, rules: Rules, option: Option) -> list[str]:
    """The option's predicted gain with each assumption it depends on at half and double; for an
    assumption of 0, the value at which the predicted change is 0."""

    lines = []
    measured = rule_figures(figures, rules.assumptions)
    for name, value in rules.assumptions.items():
        origin = provenance(name, measured, rules.assumptions, rules.earlier)
        if origin not in ("assumed", SETTING):
            continue  # measured here: no sensitivity to an assumption the formula does not use
        if name not in option.inputs and not set(ASSUMPTION_USERS.get(name, ())) & set(option.inputs):
            continue
        if origin == SETTING:
            line = setting_sensitivity(figures, rules, option, name, value, measured)
            lines += [line] if line else []
            continue
        if not value:
            # an assumed 0 (a cost no micro times) has no half or double: where the gain reads it directly, the
            # value at which the predicted change is 0 says how large that cost would have to be to cancel it
            even = value_for(option.gain_formula, measured, name, 0.0) if name in option.inputs else None
            if even is not None:
                lines.append(
                    f"{name} = {fmt_figure(value)} (assumed, so its half and double are 0 too): the predicted"
                    f" change is 0 at {name} = {fmt_figure(even)}"
                )
            continue
        gains = []
        for factor in (0.5, 2.0):
            values = rule_figures(figures, rules.assumptions | {name: value * factor})
            gains.append(fmt_ms(evaluate(option.gain_formula, values)))
        if gains[0] == gains[1]:
            continue  # it cannot change this gain here (a MoE term on a dense model)
        lines.append(f"{name} = {fmt_figure(value)} (assumed): {gains[0]} ms at half, {gains[1]} ms at double")
    return lines


def setting_sensitivity(
    figures: KeyFigures, rules: Rules, option: Option, name: str, value: float, measured: dict[str, float | None]
) -> str:
    """The option's predicted gain with a drafter setting at half and double (whole numbers): what
    another setting would buy, not how wrong a guess could be. The replay and the verify GEMMs are
    computed again at each; a micro timed only at the setting applied (the GPU drafter's) holds its
    value there, and the line says so, rather than falling back to its assumption."""
    gains, held = [], set()
    settings = (max(1, round(value / 2)), round(value * 2))
    for setting in settings:
        values = rule_figures(figures, rules.assumptions | {name: float(setting)})
        for assumed in MEASURED_IN_PLACE:
            if measured_by(assumed, measured) and not measured_by(assumed, values) and assumed in option.inputs:
                values[assumed] = measured[assumed]
                held.add(assumed)
        gains.append(fmt_ms(evaluate(option.gain_formula, values)))
    if gains[0] == gains[1]:
        return ""
    kept = f", {' and '.join(sorted(held))} held at its measurement at {name} = {fmt_figure(value)}" if held else ""
    return (
        f"{name} = {fmt_figure(value)} ({SETTING}): {gains[0]} ms at {name} = {settings[0]},"
        f" {gains[1]} ms at {settings[1]}{kept}"
    )


def measured_instead(assumption: str, values: dict[str, float | None]) -> str:
    """The figure(s) this campaign measured where the rules would read ``assumption`` (itself, or
    every figure computed from it), so the formulas do not use it here; "" where one still does."""
    users = (assumption,) if assumption in MEASURED_IN_PLACE else ASSUMPTION_USERS.get(assumption, ())
    found = [measured_by(user, values) for user in users]
    return " and ".join(f for f in found if f) if found and all(found) else ""


def decision_section(figures: KeyFigures, rules: Rules, record: list[Option], findings: Findings) -> str:
    """The options ranked by predicted TPOT change, each with its formula, inputs and the
    clause that decided it; every assumption with its sensitivity, each option's ledger history."""
    values = rule_figures(figures, rules.assumptions)
    rows = [
        [
            str(o.rank) if o.rank else "-",
            o.title,
            fmt_ms(o.gain_ms),
            "n/a" if o.gain_pct is None else f"{o.gain_pct:+.1f}",
            f"`{o.gain_formula}` with "
            + ", ".join(
                f"{k} = {fmt_figure(v)} ({provenance(k, values, rules.assumptions, rules.earlier)})"
                for k, v in o.inputs.items()
            ),
            f"**{o.decision}**: {o.reason}",
        ]
        for o in record
    ]
    origins = {k: provenance(k, values, rules.assumptions, rules.earlier) for k in rules.assumptions}
    assumed = ", ".join(
        f"{k} = {fmt_figure(v)}"
        + (f" (not used: {used} measured here)" if (used := measured_instead(k, values)) else "")
        for k, v in rules.assumptions.items()
        if k not in rules.earlier and origins[k] != SETTING
    )
    settings = ", ".join(f"{k} = {fmt_figure(v)}" for k, v in rules.assumptions.items() if origins[k] == SETTING)
    # an earlier record's value this campaign measured itself does not stand: not listed
    earlier = {k: where for k, where in rules.earlier.items() if not origins[k].startswith("measured")}
    if earlier:
        assumed += "; measured by an earlier campaign's experiment on the same hardware, shape and vLLM instead: " + (
            ", ".join(f"{k} = {fmt_figure(rules.assumptions[k])} ({where})" for k, where in earlier.items())
        )
    tpot = values.get("tpot_ms")
    return (
        "## Decision record\n\n"
        f"Rules: `{rules.path.name}` (`when` decides whether an option applies, `gain_ms` predicts the TPOT"
        f" it saves from this campaign's figures). Predictions are against TPOT {fmt(tpot, 3)} ms"
        f" (c={figures.capture_concurrency}, no profiler); a positive change is faster. Assumptions, stated"
        f" and editable in the rules file: {assumed}."
        + (
            f" The n-gram drafter's settings, which its experiments apply (not assumptions): {settings}."
            if settings
            else ""
        )
        + " Options that compromise precision are rejected"
        " whatever they buy; the gain is still shown.\n\n"
        + md_table(["rank", "option", "predicted ΔTPOT ms", "% of TPOT", "formula and inputs", "decision"], rows)
        + "\nWhy each option could help, what its prediction rests on (each stated assumption at half and"
        " double its value) and how it fared before:\n\n"
        + "\n".join(
            f"- {o.title}: {o.why}"
            + "".join(f"; {line}" for line in sensitivity(figures, rules, o))
            + (f"; {h}" if (h := ledger_history(findings, o.id)) else "")
            for o in record
        )
        + "\n"
        + levels_table(figures, rules, record)
    )


def levels_table(figures: KeyFigures, rules: Rules, record: list[Option]) -> str:
    """Each option's predicted ΔTPOT at every concurrency served (tasks/decisions/levels.py)."""
    levels = predictions_by_level(figures, rules)
    if len(levels) < 2:
        return ""
    scaled = sorted({name for level in levels for name in level.scaled})
    rows = [
        [o.title]
        + [
            "n/a"
            if (gain := level.gains_ms.get(o.id)) is None
            else f"{gain:+.3f} ({level.gain_pct(o.id):+.1f}%)"
            if level.gain_pct(o.id) is not None
            else f"{gain:+.3f}"
            for level in levels
        ]
        for o in record
    ]
    return (
        "\nPredicted ΔTPOT ms (% of that level's TPOT) at every concurrency served: each level's own TPOT and the"
        " micros at its own tokens a step; the traced figures a step's batch changes"
        f" ({', '.join(scaled) or 'none'}) carried from c={figures.capture_concurrency} by the micros' ratio"
        " between the two batches (attention and the KV read by the tokens a step); an option reading a traced"
        " figure no micro carries (a rank's waiting, the step's wall) is n/a away from the capture's level."
        " `[campaign] auto_rank_concurrency` ranks `auto`'s experiments at one of these levels.\n\n"
        + md_table(["option", *(f"c={level.concurrency}" for level in levels)], rows)
    )


def baseline_section(figures: KeyFigures, findings: Findings, record: list[Option]) -> str:
    """Gives baseline.json (this campaign's figures with their noise, and the decision record's
    predictions) and, with `campaign.baseline` set, compares this campaign against that one."""
    campaign = findings.session.config.campaign
    mine = snapshot(
        figures,
        findings.state.campaign,
        str(findings.session.state_path.absolute()),
        {o.id: o.gain_ms for o in record},
        campaign.applied_option,
        workload_metrics(findings),
    )
    findings.attach("baseline.json", mine.model_dump_json(indent=1).encode())
    text = (
        "## Baseline\n\nThis campaign's figures with their noise, for a later campaign to compare against:"
        " [baseline.json](baseline.json) (`orchestrate compare A B` takes it, or the todo file).\n"
    )
    if campaign.baseline:
        other = load_snapshot(Path(campaign.baseline))
        text += (
            f"\n## Versus baseline\n\nA = `{other.campaign}` ({other.source}), B = this campaign.\n\n"
            + comparison_table(other, mine)
        )
    return text


def configuration_section(findings: Findings) -> str:
    """The config parts each result came from, merged, and the todos a later edit made stale."""
    recorded: dict[str, Any] = {}
    for todo in findings.state.todos:
        for section, values in (todo.inputs or {}).items():
            if isinstance(values, dict):
                recorded.setdefault(section, {}).update(values)
            else:
                recorded[section] = values
    stale = []
    for todo in findings.state.todos:
        spec = findings.specs.get(todo.id)
        if spec is not None and todo.status == Status.completed:
            reason = stale_reason(todo, spec, findings.state)
            if reason:
                stale.append([todo.id, reason])
    text = (
        "## How to reproduce\n\n```\n./dev orchestrate resume            # this campaign, from its todo file\n"
        "./dev orchestrate reset TASK        # redo one task and what depends on it\n"
        "./dev orchestrate report            # regenerate this document\n```\n\n"
        f"Campaign `{findings.state.campaign}`. The configuration the results came from, as each todo"
        " recorded its inputs (environment values as digests):\n\n```json\n"
        + json.dumps(recorded, indent=1, sort_keys=True)
        + "\n```\n"
    )
    if stale:
        text += (
            "\n**Stale results**: the config changed since these ran; `orchestrate resume` runs them"
            " again with their dependents:\n\n" + md_table(["todo", "why"], stale)
        )
    return text
