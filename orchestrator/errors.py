"""One exception tree for the whole tool, each class mapped to a documented exit code.

The CLI catches ``OrchestrateError`` and prints ``str(err)`` as one line, so every message
here must say what went wrong, where (file, field, host) and how to fix it.
"""

from __future__ import annotations


class OrchestrateError(Exception):
    """Base of every error the tool reports to its user without a traceback."""

    exit_code = 1


class TaskFailed(OrchestrateError):
    """A task's own work failed (a benchmark crashed, the server died). `resume` retries it."""

    exit_code = 1

    def __init__(self, message: str, output_tail: str = "") -> None:
        super().__init__(message)
        self.output_tail = output_tail


class InputError(OrchestrateError):
    """Bad user input: config, state file, trace, model config. Nothing on disk was changed."""

    exit_code = 2


class StateLocked(OrchestrateError):
    """Another orchestrator holds the state file's lock."""

    exit_code = 3


class HostError(OrchestrateError):
    """The host could not be reached or refused us (auth, host key, connection lost)."""

    exit_code = 4


class ConnectionLost(HostError):
    """The SSH connection dropped during a command. The runner re-runs the task (tasks are
    idempotent) within its attempt limit, since the command may or may not have finished."""


class HostKeyError(HostError):
    """An unknown or changed SSH host key. Never trusted automatically."""


class CommandFailed(TaskFailed):
    """A command on the host exited non-zero; carries host, command, exit code and output tail."""

    def __init__(self, host: str, command: str, exit_code: int, stdout: str, stderr: str) -> None:
        tail = tail_lines(stderr or stdout, 20)
        first = command if len(command) < 160 else command[:157] + "..."
        super().__init__(f"on {host}: `{first}` exited {exit_code}", output_tail=tail)
        self.host, self.command, self.command_exit_code = host, command, exit_code
        self.stdout, self.stderr = stdout, stderr


class UnitBug(OrchestrateError):
    """A phase unit broke the engine's contract (it read a result it did not declare, or a
    findings section asked for a task no unit declares): a bug in orchestrate, not the user's
    input; retrying changes nothing. The message names both tasks."""

    exit_code = 70


class Interrupted(OrchestrateError):
    """Ctrl-C: the state was left consistent and `orchestrate resume` goes on."""

    exit_code = 130


def tail_lines(text: str, count: int) -> str:
    """The last ``count`` lines of ``text``: enough context for an error, not the whole log."""
    lines = text.rstrip("\n").splitlines()
    return "\n".join(lines[-count:])
