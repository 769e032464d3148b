"""The `commands` unit: plain shell commands on the host (`[[commands]]` in campaign.toml), each
a todo whose output is kept as an artifact.

For facts about the host (`nvidia-smi topo -m`, driver and library versions), for a user's own
steps, and for quick real campaigns in the engine's own tests. Always on: it has tasks when the
config lists commands.
"""

from __future__ import annotations

from orchestrator.atomic import write_atomic
from orchestrator.campaign import TaskContext, TaskSpec
from orchestrator.refs import TaskRef
from orchestrator.schema import Priority
from tasks.commands.config import CommandTask
from tasks.commands.results import CommandOutput
from tasks.session import Session
from tasks.unit import PhaseUnit


def command_action(session: Session, command: str, timeout_s: float):
    def run(ctx: TaskContext) -> CommandOutput:
        result = session.host().run(command, timeout_s=timeout_s)
        artifact = ctx.artifacts_dir / "output.txt"
        write_atomic(artifact, (result.stdout + result.stderr).encode())
        return CommandOutput(exit_code=result.exit_code, artifact=str(artifact), output_head=result.stdout[:2000])

    return run


def _specs(session: Session, enabled: frozenset[str]) -> list[TaskSpec]:
    # A user's todo: its id is the config's, typed by what every command returns.
    return [
        TaskSpec(
            TaskRef(command.id, CommandOutput),
            content=command.content,
            kind="command",
            action=command_action(session, command.run, command.timeout_s),
            depends_on=tuple(command.depends_on),
            priority=Priority(command.priority),
            inputs={"commands": command.model_dump(include={"run"})},
        )
        for command in session.config.commands
    ]


UNIT = PhaseUnit(name="commands", specs=_specs, config=list[CommandTask], config_default=list, selectable=False)
