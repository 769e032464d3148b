"""The campaign's experiments, planned once when the campaign is built: the listed ones (each an
option with its server change, or a grid's points), the options `experiments = "auto"` may add,
and which of those a decision record chooses. The plan is held by the session."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.errors import InputError
from tasks.decisions.apply import rule_change
from tasks.decisions.decide import Decision, ShortOf
from tasks.decisions.drafter_settings import drafter_mismatch
from tasks.decisions.rules import session_rules
from tasks.experiments.chain import chain_ids
from tasks.experiments.config import GRID_OPTION, Change, Experiment
from tasks.experiments.grid import expand
from tasks.macro.config import concurrency_levels
from tasks.session import Session

ELIGIBLE_NOTE = (
    "prioritised options, those not pursued only because TPOT's noise hides them, and"
    " precision trades whose predicted change clears the bar, by predicted gain"
)


@dataclass(frozen=True)
class ExperimentPlan:
    """The campaign's experiments, resolved once when the campaign is built: the ones listed, the
    options `auto` may add (id -> experiment), and why each other option cannot be applied by
    configuration alone."""

    listed: list[Experiment] = field(default_factory=list)
    candidates: dict[str, Experiment] = field(default_factory=dict)
    not_applicable: dict[str, str] = field(default_factory=dict)

    @property
    def every(self) -> list[Experiment]:
        return [*self.listed, *self.candidates.values()]


def plan_of(session: Session) -> ExperimentPlan:
    """The session's experiment plan (resolved on first use, then held by the session)."""
    if "experiments" not in session.plans:
        session.plans["experiments"] = ExperimentPlan(*_resolve(session))
    return session.plans["experiments"]


def configured(session: Session) -> tuple[list[Experiment], dict[str, Experiment], dict[str, str]]:
    plan = plan_of(session)
    return plan.listed, plan.candidates, plan.not_applicable


def _resolve(session: Session) -> tuple[list[Experiment], dict[str, Experiment], dict[str, str]]:
    config = session.config
    listed = config.experiments if isinstance(config.experiments, list) else []
    auto = config.experiments == "auto" or config.campaign.auto_experiments
    if not listed and not auto:
        return [], {}, {}
    rules = session_rules(session)
    tp = config.service.tensor_parallel
    explicit: list[Experiment] = []
    for index, entry in enumerate(listed):
        if entry.grid is not None:
            explicit += expand(entry, index, session.config_file)
            continue
        if entry.option == GRID_OPTION:
            raise InputError(
                f"{session.config_file}: field 'experiments.{index}.option': missing; name the decision"
                f" option it applies (known: {', '.join(rules.specs)}), or give a grid"
            )
        option = rules.specs.get(entry.option)
        if option is None:
            raise InputError(
                f"{session.config_file}: field 'experiments.{index}.option': '{entry.option}' is not an option"
                f" of {rules.path.name} (known: {', '.join(rules.specs)})"
            )
        given = Change(
            tuple(entry.extra_args or ()), tuple(sorted((entry.env or {}).items())), entry.model, entry.tensor_parallel
        )
        change, why = (given, "") if not given.empty else rule_change(option, tp)
        if change is None:
            raise InputError(
                f"{session.config_file}: field 'experiments.{index}': option '{entry.option}' has no default"
                f" change ({why}); give extra_args, env, model or tensor_parallel"
            )
        if mismatch := drafter_mismatch(change.extra_args, rules.assumptions):
            raise InputError(
                f"{session.config_file}: field 'experiments.{index}.extra_args': its --speculative-config sets"
                f" {mismatch} in {rules.path.name}'s [assumptions], so the prediction would describe another"
                " drafter than this experiment runs; make the two equal (campaign.decision_rules names your copy)"
            )
        explicit.append(Experiment(entry.name or entry.option, entry.option, change, entry.capture, entry.serving))
    names = [e.name for e in explicit]
    if len(set(names)) != len(names):
        raise InputError(
            f"{session.config_file}: field 'experiments': two experiments are named"
            f" '{next(n for n in names if names.count(n) > 1)}'; give one a `name`"
        )
    candidates, not_applicable = {}, {}
    if auto:
        for option_id, option in rules.specs.items():
            if option_id in {e.option for e in explicit}:
                continue
            change, why = rule_change(option, tp)
            if change is None:
                not_applicable[option_id] = why
            else:
                candidates[option_id] = Experiment(option_id, option_id, change, auto=True)
    return explicit, candidates, not_applicable


def chosen_by_record(
    record: Any, candidates: dict[str, Experiment], limit: int, at: int | None = None
) -> list[Experiment]:
    """The experiments `auto` runs for a decision record (see ELIGIBLE_NOTE), at most ``limit``;
    ranked by the predicted gain at concurrency ``at`` where the record predicted that level
    (options it could not predict there last), else at the capture's."""
    bar = max(record.min_gain_pct, record.noise_pct or 0.0)
    picked = []
    for option in record.options:
        if option.id not in candidates or option.gain_pct is None:
            continue
        noise_only = option.decision == Decision.NOT_PURSUED and option.short_of == ShortOf.NOISE
        trade = option.decision == Decision.REJECTED and abs(option.gain_pct) >= bar
        if option.decision == Decision.PRIORITISED or noise_only or trade:
            picked.append(option)
    rank = {Decision.PRIORITISED: 0, Decision.NOT_PURSUED: 1}
    level = record.level(at) if at is not None and hasattr(record, "level") else None
    if level is not None:
        picked.sort(key=lambda o: (level.gain_pct(o.id) is None, -abs(level.gain_pct(o.id) or 0)))
    else:
        picked.sort(key=lambda o: (rank.get(o.decision, 2), -abs(o.gain_pct or 0)))
    return [candidates[o.id] for o in picked[:limit]]


def check_campaign_inputs(session: Session) -> None:
    """The campaign section's files and names, checked when the campaign is built (so `init` and
    `check` refuse them, exit 2, before any server starts): the decision rules load (every
    formula's names known), `applied_option` is one of their options, `baseline` exists."""
    rules = session_rules(session)
    campaign, where = session.config.campaign, session.config_file
    if campaign.applied_option is not None and campaign.applied_option not in rules.specs:
        close = difflib.get_close_matches(campaign.applied_option, list(rules.specs), n=1)
        raise InputError(
            f"{where}: field 'campaign.applied_option': '{campaign.applied_option}' is not an option of"
            f" {rules.path.name} ({f'did you mean {close[0]!r}?' if close else 'known: ' + ', '.join(rules.specs)})"
        )
    if campaign.baseline is not None and not Path(campaign.baseline).exists():
        raise InputError(
            f"{where}: field 'campaign.baseline': {campaign.baseline} does not exist; name a todo file,"
            " a reports/<campaign> folder or its baseline.json"
        )
    if campaign.auto_rank_concurrency is not None:
        served = sorted({1, *concurrency_levels(session.config.macro.concurrency_max)})
        if campaign.auto_rank_concurrency not in served:
            raise InputError(
                f"{where}: field 'campaign.auto_rank_concurrency': {campaign.auto_rank_concurrency} is not a level"
                f" this campaign serves ({', '.join(map(str, served))}); name one of them"
            )


def experiments_run(findings: Any) -> list[Experiment]:
    """The experiments whose todos are in this campaign's todo file, in order."""
    explicit, candidates, _ = configured(findings.session)
    todos = findings.state.by_id()
    return [e for e in [*explicit, *candidates.values()] if any(todo_id in todos for todo_id in chain_ids(e).values())]
