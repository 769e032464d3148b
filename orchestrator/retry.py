"""Every retry policy of the tool, defined once, each with its condition, backoff and limit.

When a policy gives up, the final error says how many attempts were made and for how long.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Any

import paramiko
import tenacity

from orchestrator.errors import CommandFailed, HostError, HostKeyError, RunKilled

RECONNECT_ATTEMPTS = 12


def _give_up(what: str) -> Callable[[tenacity.RetryCallState], Any]:
    def callback(state: tenacity.RetryCallState) -> Any:
        last = state.outcome.exception() if state.outcome else None
        raise HostError(
            f"{what}: gave up after {state.attempt_number} attempts over"
            f" {state.seconds_since_start:.0f} s; last error: {type(last).__name__}: {last}"
        ) from None

    return callback


def _is_transient_connect_error(error: BaseException) -> bool:
    # Host-key and authentication refusals are decisions, not blips: never retried.
    if isinstance(error, HostKeyError | paramiko.AuthenticationException | paramiko.BadHostKeyException):
        return False
    if isinstance(error, HostError):
        return False
    return isinstance(error, OSError | EOFError | paramiko.SSHException)


def _say_what_we_wait_for(what: str, attempts: int) -> Callable[[tenacity.RetryCallState], None]:
    """A line on stderr before each wait: a minute of backoff must not look like a hang."""

    def callback(state: tenacity.RetryCallState) -> None:
        last = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0
        print(
            f"orchestrate: {what}: attempt {state.attempt_number} of {attempts} failed"
            f" ({type(last).__name__}: {last}); trying again in {wait:.1f} s",
            file=sys.stderr,
            flush=True,
        )

    return callback


def reconnect_policy(host: str) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    """(Re)connect over SSH: exponential backoff 0.5 s -> 10 s, up to 12 attempts (~1.5 min),
    each wait said on stderr."""
    return tenacity.retry(
        retry=tenacity.retry_if_exception(_is_transient_connect_error),
        wait=tenacity.wait_exponential(multiplier=0.5, max=10),
        stop=tenacity.stop_after_attempt(RECONNECT_ATTEMPTS),
        before_sleep=_say_what_we_wait_for(f"waiting for ssh to {host}", RECONNECT_ATTEMPTS),
        retry_error_callback=_give_up(f"ssh connect to {host}"),
        reraise=False,
    )


def poll_policy(deadline_s: float, interval_s: float = 0.5) -> tenacity.Retrying:
    """Poll until a condition is met: fixed short interval (readiness seen quickly), a deadline."""
    return tenacity.Retrying(
        retry=tenacity.retry_if_result(lambda ok: not ok),
        wait=tenacity.wait_fixed(interval_s),
        stop=tenacity.stop_after_delay(deadline_s),
        retry_error_callback=lambda state: False,
    )


RANK_KILLED = re.compile(r"Signal \d+ \(SIG\w+\) received by PID")
"""How torchrun reports a rank killed by a signal."""


def _rank_killed_by_signal(error: BaseException) -> bool:
    if isinstance(error, RunKilled):
        return True
    return isinstance(error, CommandFailed) and bool(RANK_KILLED.search(error.stderr + error.stdout))


def _killed_how(error: BaseException | None) -> str:
    if isinstance(error, RunKilled):
        return str(error)
    found = RANK_KILLED.search(error.stderr + error.stdout) if isinstance(error, CommandFailed) else None
    return f"{found[0].removesuffix(' received by PID') if found else '?'}: a rank died from a signal"


def crashed_rank_policy(say: Callable[[str], None]) -> tenacity.Retrying:
    """A `torchrun` whose rank died from a signal runs once more (seen once in about a dozen runs
    of the CPU all-reduce bench: rank 0 SIGABRT, no Python error), and so does a run across nodes
    that lost a rank to a signal or vanished (``RunKilled``); a rank that exits with an error is
    not retried, and a second death fails the task as before."""
    return tenacity.Retrying(
        retry=tenacity.retry_if_exception(_rank_killed_by_signal),
        stop=tenacity.stop_after_attempt(2),
        before_sleep=lambda state: say(f"{_killed_how(state.outcome.exception())}; running it once more"),
        reraise=True,
    )
