"""The `experiments` unit: the campaign checks its own advice by running it.

The decision record becomes a todo (`decision_record`) once the campaign's measurements are
done; each experiment is then a chain of todos that launches the campaign's server with one
option applied, serves it at the campaign's levels (same repeats, same prompts), optionally
captures and analyses it, and the findings set predicted beside realised. With
`experiments = "auto"` the chains are added when the record is written: the todo list grows
from the findings, as an engineer's would. Always on; it has tasks when the config lists
experiments.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from orchestrator.campaign import Need, TaskSpec
from orchestrator.errors import InputError
from orchestrator.schema import Priority, Status, TodoState
from tasks.experiments.chain import (
    chain_ids,
    chain_specs,
    need_name,
    scope,
    variant_session,
)
from tasks.experiments.config import EXPERIMENTS_FIELD, GRID_OPTION, Change, Experiment
from tasks.experiments.grid import expand
from tasks.experiments.results import DECISION_RECORD, DecisionRecord
from tasks.session import Session
from tasks.unit import PhaseUnit

ELIGIBLE_NOTE = (
    "prioritised options, those not pursued only because TPOT's noise hides them, and"
    " precision trades whose predicted change clears the bar, by predicted gain"
)


def rules_of(session: Session) -> Any:
    from tasks.synthesis.decisions import RULES_PATH, load_rules

    chosen = session.config.campaign.decision_rules
    if chosen and not Path(chosen).is_file():
        raise InputError(
            f"{session.config_file}: field 'campaign.decision_rules': {chosen} is not a file;"
            " name a decision rules TOML file, or leave it out for the shipped one"
        )
    return load_rules(Path(chosen) if chosen else RULES_PATH)


def _default_change(option: Any, tp: int) -> tuple[Change | None, str]:
    """The rule's own `apply`, or None and why it cannot be applied by configuration alone."""
    from tasks.synthesis.decisions import evaluate

    apply = option.apply
    if apply is None or apply.requires:
        return None, (apply.requires if apply else "the rule has no `apply`")
    new_tp = apply.tensor_parallel
    if isinstance(new_tp, str):
        value = evaluate(new_tp, {"tp": float(tp)})
        if value is None or value < 1 or value != int(value):
            return None, f"tensor_parallel = {new_tp} gives {value} at TP {tp}"
        new_tp = int(value)
    change = Change(tuple(apply.extra_args), tuple(sorted(apply.env.items())), apply.model, new_tp)
    return (None, "its `apply` changes nothing") if change.empty else (change, "")


def configured(session: Session) -> tuple[list[Experiment], dict[str, Experiment], dict[str, str]]:
    """The listed experiments, the options `auto` may add (id -> experiment), and why each
    other option cannot be applied by configuration."""
    config = session.config
    listed = config.experiments if isinstance(config.experiments, list) else []
    auto = config.experiments == "auto" or config.campaign.auto_experiments
    if not listed and not auto:
        return [], {}, {}
    rules = rules_of(session)
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
        change, why = (given, "") if not given.empty else _default_change(option, tp)
        if change is None:
            raise InputError(
                f"{session.config_file}: field 'experiments.{index}': option '{entry.option}' has no default"
                f" change ({why}); give extra_args, env, model or tensor_parallel"
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
            change, why = _default_change(option, tp)
            if change is None:
                not_applicable[option_id] = why
            else:
                candidates[option_id] = Experiment(option_id, option_id, change, auto=True)
    return explicit, candidates, not_applicable


def chosen_by_record(record: Any, candidates: dict[str, Experiment], limit: int) -> list[Experiment]:
    """The experiments `auto` runs for a decision record (see ELIGIBLE_NOTE), at most ``limit``."""
    bar = max(record.min_gain_pct, record.noise_pct or 0.0)
    picked = []
    for option in record.options:
        if option.id not in candidates or option.gain_pct is None:
            continue
        noise_only = option.decision == "not pursued" and option.gain_pct > 0 and "spread" in option.reason
        trade = option.decision == "rejected" and abs(option.gain_pct) >= bar
        if option.decision == "prioritised" or noise_only or trade:
            picked.append(option)
    picked.sort(key=lambda o: ({"prioritised": 0, "not pursued": 1}.get(o.decision, 2), -abs(o.gain_pct or 0)))
    return [candidates[o.id] for o in picked[:limit]]


def _base_ids(session: Session, enabled: frozenset[str], units: dict[str, PhaseUnit]) -> list[str]:
    return [
        spec.id
        for unit in units.values()
        if unit.name in enabled and unit.name != "commands"
        for spec in unit.specs(session, enabled)
    ]


def check_campaign_inputs(session: Session) -> None:
    """The campaign section's files and names, checked when the campaign is built (so `init` and
    `check` refuse them, exit 2, before any server starts): the decision rules load (every
    formula's names known), `applied_option` is one of their options, `baseline` exists."""
    rules = rules_of(session)
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


def _specs(session: Session, enabled: frozenset[str], units: dict[str, PhaseUnit]) -> list[TaskSpec]:
    from tasks.experiments.record import decision_record_action

    check_campaign_inputs(session)
    explicit, candidates, _ = configured(session)
    if not explicit and not candidates:
        return []
    record = TaskSpec(
        DECISION_RECORD,
        "Write the decision record: predicted TPOT change of each option",
        "experiments",
        decision_record_action(session, _declared(units)),
        depends_on=tuple(_base_ids(session, enabled, units)),
        priority=Priority.high,
        inputs={"decision_rules": session.config.campaign.decision_rules or "shipped"},
    )
    return [record] + [spec for experiment in explicit for spec in chain_specs(session, experiment, units)]


def _declared(units: dict[str, PhaseUnit]) -> frozenset[str]:
    return frozenset({DECISION_RECORD.id} | {ref.id for unit in units.values() for ref in unit.results})


def _grow(session: Session, state: TodoState, units: dict[str, PhaseUnit]) -> list[TaskSpec]:
    _, candidates, _ = configured(session)
    if not candidates:
        return []
    todos = state.by_id()
    todo = todos.get(DECISION_RECORD.id)
    picked = []
    if todo is not None and todo.status == Status.completed and todo.result:
        picked = chosen_by_record(
            DecisionRecord.model_validate(todo.result), candidates, session.config.campaign.max_experiments
        )
    # An experiment already in the todo file stays, whatever a later record chose.
    picked += [e for e in candidates.values() if e not in picked and any(i.startswith(scope(e)) for i in todos)]
    return [spec for experiment in picked for spec in chain_specs(session, experiment, units)]


def _needs(session: Session) -> dict[str, Need]:
    from tasks.service.lifecycle import ServiceLifecycle
    from tasks.service.needs import VariantServiceNeed

    explicit, candidates, _ = configured(session)
    experiments = [*explicit, *candidates.values()]
    names = {need_name(e) for e in experiments}
    return {
        need_name(e): VariantServiceNeed(
            need_name(e),
            ServiceLifecycle(variant_session(session, e)),
            frozenset({"service", "accelerators_free"} | names - {need_name(e)}),
        )
        for e in experiments
    }


def make_unit(base_units: list[PhaseUnit]) -> PhaseUnit:
    """The experiments unit over ``base_units`` (the phases an experiment re-runs on its variant
    server); the registry hands them in, so this package never imports the registry."""
    units = {unit.name: unit for unit in base_units}
    # Its findings section follows the decision record (tasks/findings.py), which it checks.
    return PhaseUnit(
        name="experiments",
        specs=lambda session, enabled: _specs(session, enabled, units),
        results=(DECISION_RECORD,),
        extra_config={"experiments": EXPERIMENTS_FIELD},
        needs=_needs,
        selectable=False,
        grow=lambda session, state: _grow(session, state, units),
    )


def experiments_run(findings: Any) -> list[Experiment]:
    """The experiments whose todos are in this campaign's todo file, in order."""
    explicit, candidates, _ = configured(findings.session)
    todos = findings.state.by_id()
    return [e for e in [*explicit, *candidates.values()] if any(todo_id in todos for todo_id in chain_ids(e).values())]
