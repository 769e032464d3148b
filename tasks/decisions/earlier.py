"""Assumptions an earlier campaign measured: where the ledger holds an experiment that measured
one (its `measured` expression over the variant's figures) on the same hardware, model shape and
vLLM version, that measurement stands in for the rules file's value, named as such.

The order of what a formula input is: this campaign's own measurement (vocabulary.MEASURED_IN_PLACE),
else an earlier campaign's (here), else the stated assumption. A record counts only where its
experiment applied the option as this campaign's rules would (the option's default change; any
change for an option a user must give one for): a speculative step measured with 5 draft tokens,
or with another drafter, is another quantity than the one this campaign's formula holds. Only
records written before this campaign started count (an earlier run of the same configuration
too), so regenerating a findings document later (after more campaigns wrote to the ledger) gives
the same record.
"""

from __future__ import annotations

import dataclasses
import statistics
from datetime import UTC, datetime
from typing import Any

from tasks.decisions.apply import rule_change
from tasks.decisions.ledger import LEDGER_NAME, LedgerRecord, load_ledger
from tasks.decisions.vocabulary import DERIVED_FROM_ASSUMPTIONS
from tasks.host.results import HOST_FACTS
from tasks.model.results import MODEL_FACTS


@dataclasses.dataclass(frozen=True)
class Identity:
    """What makes two campaigns' measurements of an assumption the same quantity."""

    model: str
    hardware: str
    vllm: str | None


def identity(findings: Any) -> Identity:
    """This campaign's model shape, hardware and vLLM version, as its ledger records write them."""
    host = findings.result(HOST_FACTS)
    model = findings.result(MODEL_FACTS)
    shapes = model.shapes if model else None
    shape = (
        f"{model.model_type} {shapes.num_layers}x{shapes.hidden_size} {shapes.weight_dtype} TP{shapes.tensor_parallel}"
        if model and shapes
        else (model.model_type if model else "unknown")
    )
    return Identity(shape, (host.hardware if host else "unknown").strip()[:80], host.vllm if host else None)


def _moment(when: datetime | str) -> datetime:
    moment = datetime.fromisoformat(when) if isinstance(when, str) else when
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def applied_changes(rules: Any, tp: int) -> dict[str, str | None]:
    """Each option of ``rules`` -> the change its experiment applies by default here, as a ledger
    record writes it (Change.describe); None where the user must give the change (any counts)."""
    return {
        option.id: (change.describe() if change else None)
        for option in rules.options
        for change in [rule_change(option, tp)[0]]
    }


def earlier_values(
    records: list[LedgerRecord],
    names: set[str],
    mine: Identity,
    before: datetime | None,
    changes: dict[str, str | None] | None = None,
) -> dict[str, tuple[float, list[str]]]:
    """Each of ``names`` some matching record measured: the median of their values and the records.
    With ``changes`` (applied_changes), a record counts only for an option those rules hold,
    applied as they apply it."""
    found: dict[str, list[tuple[float, str]]] = {}
    for record in records:
        if (record.model, record.hardware, record.vllm) != (mine.model, mine.hardware, mine.vllm):
            continue
        if changes is not None and (
            record.option not in changes or changes[record.option] not in (None, record.change)
        ):
            continue
        # Recorded before this campaign started: a run of this same configuration counts (its spread
        # is what repeats measure); this campaign's own records and later ones do not, so regenerating
        # the findings after more campaigns gives the same record.
        if before is not None and _moment(record.recorded_at) >= _moment(before):
            continue
        for name, value in record.measured_inputs.items():
            if name in names and value is not None:
                found.setdefault(name, []).append((value, record.id))
    return {name: (statistics.median(v for v, _ in pairs), [i for _, i in pairs]) for name, pairs in found.items()}


def with_earlier(rules: Any, findings: Any) -> Any:
    """``rules`` (decisions.rules.Rules) with the assumptions earlier campaigns measured in place."""
    session = findings.session
    if session is None or findings.result(HOST_FACTS) is None:
        return rules
    path = session.reports_dir / LEDGER_NAME
    records = load_ledger(path).records if path.exists() else []
    if not records:
        return rules
    started = [todo.started_at for todo in findings.state.todos if todo.started_at]
    before = min(started) if started else None
    names = set(rules.assumptions) | set(DERIVED_FROM_ASSUMPTIONS)
    changes = applied_changes(rules, session.config.service.tensor_parallel)
    values = earlier_values(records, names, identity(findings), before, changes)
    if not values:
        return rules
    return dataclasses.replace(
        rules,
        # a derived input (spec_expected_tokens, kv_fp8_layer_delta_us) given here stands as it is
        assumptions=rules.assumptions | {name: value for name, (value, _) in values.items()},
        earlier={
            name: (ids[0] if len(ids) == 1 else f"median of {len(ids)} records, first {ids[0]}")
            + (
                f", in place of the assumed {rules.assumptions[name]:g}"
                if name in rules.assumptions
                else " in place of the assumptions it is derived from"
            )
            for name, (_, ids) in values.items()
        },
    )
