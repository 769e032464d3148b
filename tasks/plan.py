"""Build the campaign (task specs, needs, report hook) from the configuration and the units."""

from __future__ import annotations

from pathlib import Path

from orchestrator.campaign import Campaign, Check, Need
from orchestrator.schema import TodoState
from tasks.findings import write_findings
from tasks.session import Session
from tasks.unit import PhaseUnit, enabled_units


def build_campaign(session: Session, units: list[PhaseUnit]) -> Campaign:
    enabled = enabled_units(units, session.config.campaign.phases)
    session.enabled = frozenset(unit.name for unit in enabled)
    specs = [spec for unit in enabled for spec in unit.specs(session, session.enabled)]
    # Needs from every unit, enabled or not: a need is a lazy handle (nothing happens until a
    # task asks for it), and a phase may need a resource another unit manages.
    needs: dict[str, Need] = {}
    for unit in units:
        if unit.needs is not None:
            needs |= unit.needs(session)
    campaign = Campaign(
        name=session.config.campaign.name,
        tasks=specs,
        needs=needs,
        artifacts_dir=session.artifacts_dir,
        max_attempts=session.config.campaign.max_attempts,
        preflight=lambda: preflight(session, enabled),
        # Every unit's, enabled or not: what an earlier configuration started is ours to stop too.
        stop=lambda: [line for unit in units if unit.stop is not None for line in unit.stop(session)],
        grow=lambda state: [spec for unit in enabled if unit.grow is not None for spec in unit.grow(session, state)],
    )

    def report(state: TodoState) -> list[Path]:
        campaign.extend(state)  # the todos the results called for have their specs too
        return write_findings(
            session,
            state,
            enabled,
            {spec.id: spec for spec in campaign.tasks},
            declared=frozenset(ref.id for unit in units for ref in unit.results),
        )

    campaign.report = report
    return campaign


def preflight(session: Session, enabled: list[PhaseUnit]) -> list[Check]:
    """Every enabled unit's checks in registry order, every problem reported; only a host that
    cannot be reached stops the rest (each later check would only repeat it)."""
    checks: list[Check] = []
    for unit in enabled:
        if unit.checks is None:
            continue
        found = unit.checks(session)
        checks += found
        if unit.name == "host" and any(check.unreachable for check in found):
            break
    return checks
