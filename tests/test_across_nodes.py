"""How a run across nodes ends when a node's run is killed: the faults are injected (a SIGKILL
to one node's run, a plain error exit), the processes and the host are real (this machine as
each node's host, the run started detached as `start_node` starts it)."""

from __future__ import annotations

import os
import shlex
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from orchestrator.errors import RunKilled, TaskFailed
from orchestrator.hosts.local import LocalHost
from orchestrator.retry import crashed_rank_policy
from tasks.allreduce.across_nodes import NodeRun, wait_all
from tasks.session import Node


def started(tmp_path: Path, index: int, command: str) -> NodeRun:
    """``command`` detached on this machine with the exit status written after it, as each
    node's torchrun is."""
    node = Node(index=index, name=f"n{index}", workdir=str(tmp_path), python="python3")
    status, log = tmp_path / f"node{index}.status", tmp_path / f"node{index}.log"
    pid = LocalHost().start_detached(
        ["sh", "-c", f"sh -c {shlex.quote(command)}; echo $? > {status}"], str(log), str(tmp_path / "pid")
    )
    return NodeRun(node, pid, str(log), str(status))


def nodes() -> SimpleNamespace:
    return SimpleNamespace(node_host=lambda index: LocalHost())


def test_a_node_run_killed_whole_is_a_killed_run_and_runs_again(tmp_path: Path) -> None:
    done = started(tmp_path, 0, "true")
    killed = started(tmp_path, 1, "echo starting; sleep 60")
    time.sleep(0.5)
    os.killpg(killed.pid, signal.SIGKILL)  # the fault: node 1's run and its wrapper die, no status
    with pytest.raises(RunKilled, match=r"node 1 \(n1\) vanished without an exit status") as raised:
        wait_all(nodes(), [done, killed], timeout_s=30)
    assert "starting" in raised.value.output_tail

    said: list[str] = []
    tries = []
    for attempt in crashed_rank_policy(said.append):
        with attempt:
            tries.append(1)
            if len(tries) == 1:
                raise raised.value
    assert len(tries) == 2 and said == [f"{raised.value}; running it once more"]


def test_a_node_run_that_exits_with_an_error_is_not_run_again(tmp_path: Path) -> None:
    failed = started(tmp_path, 1, "echo 'ValueError: bad size' >&2; exit 3")
    with pytest.raises(TaskFailed, match=r"node 1 \(n1\) exited with status 3") as raised:
        wait_all(nodes(), [failed], timeout_s=30)
    assert not isinstance(raised.value, RunKilled)
    tries = []
    with pytest.raises(TaskFailed):
        for attempt in crashed_rank_policy(lambda line: None):
            with attempt:
                tries.append(1)
                raise raised.value
    assert len(tries) == 1


def test_a_node_run_whose_rank_died_from_a_signal_runs_again(tmp_path: Path) -> None:
    aborted = started(tmp_path, 1, "echo 'Signal 6 (SIGABRT) received by PID 4242'; exit 1")
    with pytest.raises(RunKilled, match=r"exited with status 1 \(Signal 6 \(SIGABRT\): a rank died from a signal\)"):
        wait_all(nodes(), [aborted], timeout_s=30)
