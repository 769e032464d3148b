"""One exception tree for the whole tool, each class mapped to a documented exit code.

The CLI catches ``OrchestrateError`` and prints ``str(err)`` as one line, so every message
here must say what went wrong, where (file, field, host) and how to fix it.
"""

from __future__ import annotations

DONE, TASK_FAILED, BAD_INPUT, LOCKED, HOST_FAILED, BUG, INTERRUPTED = 0, 1, 2, 3, 4, 70, 130
EXIT_CODES: dict[int, str] = {
    DONE: "done",
    TASK_FAILED: "a task failed; its `error` in the todo file has the message and output tail; `resume` retries it",
    BAD_INPUT: "bad input: config, state file, trace, model config, rules, ledger, arguments (one line names the file,"
    " field and fix; nothing on disk changed)",
    LOCKED: "another orchestrate holds this state file's lock (the message names its pid)",
    HOST_FAILED: "the host could not be reached or refused us (SSH auth, a key file that is not a key, unknown or changed"
    " host key)",
    BUG: "a bug in orchestrate: a phase unit read a result it did not declare, or a findings section asked for a"
    " task no unit declares (the line names both; please report it)",
    INTERRUPTED: "interrupted (Ctrl-C or SIGTERM); the state was saved and `resume` goes on",
}
"""Every exit code and what it means: the one source (the README's table is checked against it,
`orchestrate --help` prints it, each error class below names its code from here)."""


class OrchestrateError(Exception):
    """Base of every error the tool reports to its user without a traceback."""

    exit_code = TASK_FAILED


class TaskFailed(OrchestrateError):
    """A task's own work failed (a benchmark crashed, the server died). `resume` retries it."""

    exit_code = TASK_FAILED

    def __init__(self, message: str, output_tail: str = "") -> None:
        super().__init__(message)
        self.output_tail = output_tail


class RunKilled(TaskFailed):
    """A `torchrun` on one node of several lost a rank to a signal, or vanished whole without
    the exit status its wrapper writes (its processes were killed: seen once in CI on the two
    namespace nodes, cause not found). Run once more by `crashed_rank_policy`, as a single-host
    run whose rank died from a signal is."""


class InputError(OrchestrateError):
    """Bad user input: config, state file, trace, model config. Nothing on disk was changed."""

    exit_code = BAD_INPUT


class StateLocked(OrchestrateError):
    """Another orchestrator holds the state file's lock."""

    exit_code = LOCKED


class HostError(OrchestrateError):
    """The host could not be reached or refused us (auth, host key, connection lost)."""

    exit_code = HOST_FAILED


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

    exit_code = BUG


class Interrupted(OrchestrateError):
    """Ctrl-C: the state was left consistent and `orchestrate resume` goes on."""

    exit_code = INTERRUPTED


def tail_lines(text: str, count: int) -> str:
    """The last ``count`` lines of ``text``: enough context for an error, not the whole log."""
    lines = text.rstrip("\n").splitlines()
    return "\n".join(lines[-count:])
