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

from collections.abc import Callable

from orchestrator.campaign import Need, TaskContext, TaskSpec
from orchestrator.schema import Priority, Status, TodoState
from tasks.decisions.record import DecisionRecord, make_record
from tasks.experiments.chain import chain_ids, chain_specs, need_name, variant_session
from tasks.experiments.config import EXPERIMENTS_FIELD
from tasks.experiments.plan import check_campaign_inputs, chosen_by_record, configured
from tasks.experiments.results import DECISION_RECORD
from tasks.service.results import ACCELERATORS_FREE, SERVICE
from tasks.session import Session
from tasks.unit import PhaseUnit
from tasks.view import Findings


def _base_ids(session: Session, enabled: frozenset[str], units: dict[str, PhaseUnit]) -> list[str]:
    return [
        spec.id
        for unit in units.values()
        if unit.name in enabled and unit.name != "commands"
        for spec in unit.specs(session, enabled)
    ]


def _specs(session: Session, enabled: frozenset[str], units: dict[str, PhaseUnit]) -> list[TaskSpec]:
    check_campaign_inputs(session)
    explicit, candidates, _ = configured(session)
    if not explicit and not candidates:
        return []
    record = TaskSpec(
        DECISION_RECORD,
        "Write the decision record: predicted TPOT change of each option",
        "experiments",
        _record_action(session, _declared(units)),
        depends_on=tuple(_base_ids(session, enabled, units)),
        priority=Priority.high,
        inputs={"decision_rules": session.config.campaign.decision_rules or "shipped"},
    )
    return [record] + [spec for experiment in explicit for spec in chain_specs(session, experiment, units)]


def _record_action(session: Session, declared: frozenset[str]) -> Callable[[TaskContext], DecisionRecord]:
    """Write the decision record from the campaign's completed results (``declared``: the task ids
    the campaign's units may declare, what the record may read)."""

    def run(ctx: TaskContext) -> DecisionRecord:
        findings = Findings(session, ctx.state, session.reports_dir / ctx.state.campaign, declared=declared)
        return make_record(findings, ctx.log)

    return run


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
            DecisionRecord.model_validate(todo.result),
            candidates,
            session.config.campaign.max_experiments,
            session.config.campaign.auto_rank_concurrency,
        )
    # An experiment already in the todo file stays, whatever a later record chose. Its own todo ids,
    # not a prefix: "exp_speculative_decoding_" begins speculative_decoding_gpu's ids too (a GPU
    # campaign then grew the CPU drafter's experiment, which its rules said does not apply there).
    picked += [e for e in candidates.values() if e not in picked and any(i in todos for i in chain_ids(e).values())]
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
            frozenset({SERVICE, ACCELERATORS_FREE} | names - {need_name(e)}),
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
        closing_section=_closing_section,
    )


def _closing_section(findings: Findings) -> str:
    from tasks.experiments.section import experiments_section  # the section reads this package's plan

    return experiments_section(findings)
