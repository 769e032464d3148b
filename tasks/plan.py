"""Build the campaign (task specs, needs, report hook) from the configuration."""

from __future__ import annotations

from orchestrator.campaign import Campaign, TaskSpec
from orchestrator.schema import Priority
from tasks.command import command_action
from tasks.findings import write_findings
from tasks.session import Session


def build_campaign(session: Session) -> Campaign:
    config = session.config
    specs: list[TaskSpec] = []
    for command in config.commands:
        specs.append(TaskSpec(
            id=command.id, content=command.content, kind="command",
            action=command_action(session.host, command.run, command.timeout_s),
            depends_on=tuple(command.depends_on), priority=Priority(command.priority),
        ))
    needs = {}
    if config.campaign.phases:
        from tasks.phases import phase_specs

        phase_tasks, needs = phase_specs(session)
        specs = phase_tasks + specs
    return Campaign(
        name=config.campaign.name,
        tasks=specs,
        needs=needs,
        artifacts_dir=session.artifacts_dir,
        report=lambda state: write_findings(session, state),
        max_attempts=config.campaign.max_attempts,
    )
