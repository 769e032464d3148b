"""torchrun on every node of a multi-node campaign at once, the way the server's ranks are laid out.

Each node runs `torch.distributed.run --nnodes N --node-rank i` as a detached process group with
its exit status written to a file; the controller polls them all. The first node to fail ends
the run: the others are stopped (a rank whose peer died waits forever in a collective) and the
failure names that node with its log's last lines. The result is read from node 0's log (rank 0
prints it). Without the interface named (GLOO_SOCKET_IFNAME) gloo resolved the hostname to
127.0.0.1 and the ranks never met: measured on namespace nodes.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.errors import RunKilled, TaskFailed, tail_lines
from orchestrator.retry import RANK_KILLED
from tasks.host_json import last_json
from tasks.session import Node, Session

FREE_PORT = "import socket, sys; s = socket.socket(); s.bind((sys.argv[1], 0)); print(s.getsockname()[1])"


@dataclass
class NodeRun:
    node: Node
    pid: int
    log: str
    status_file: str


def free_port(session: Session, node: Node) -> int:
    """A port free on ``node``'s data-plane address now (the rendezvous of this run)."""
    out = session.node_host(node.index).run([node.python, "-c", FREE_PORT, str(node.ip)], timeout_s=60)
    return int(out.stdout.strip())


def run_across_nodes(
    session: Session, script: Path, args: list[str], ranks: int, env: Mapping[str, str], timeout_s: float, tag: str
) -> Any:
    """``script`` under torchrun with ``ranks`` ranks split evenly over every node; the JSON
    document rank 0 printed."""
    nodes = session.nodes
    per_node = ranks // len(nodes)
    port = free_port(session, nodes[0])
    runs: list[NodeRun] = []
    try:
        for node in nodes:
            runs.append(start_node(session, node, script, args, per_node, port, env, tag))
        wait_all(session, runs, timeout_s)
        head = runs[0]
        text = session.node_host(0).read_text(head.log)
        return last_json(script.name, nodes[0].label, text)
    finally:
        for run in runs:
            host = session.node_host(run.node.index)
            if host.group_pids(run.pid):
                host.stop_group(run.pid, grace_s=5)


def start_node(
    session: Session,
    node: Node,
    script: Path,
    args: list[str],
    per_node: int,
    port: int,
    env: Mapping[str, str],
    tag: str,
) -> NodeRun:
    nodes = session.nodes
    folder = f"{node.workdir}/allreduce"
    log, status_file, pid_file = (f"{folder}/{tag}.node{node.index}.{kind}" for kind in ("log", "status", "pid"))
    remote = session.ship(script, node)
    host = session.node_host(node.index)
    host.run(f"mkdir -p {shlex.quote(folder)} && rm -f {shlex.quote(status_file)}", timeout_s=30)
    command = [
        node.python,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        str(len(nodes)),
        "--node-rank",
        str(node.index),
        "--nproc-per-node",
        str(per_node),
        "--master-addr",
        str(nodes[0].ip),
        "--master-port",
        str(port),
        remote,
        *args,
    ]
    wrapped = ["sh", "-c", f"{shlex.join(command)}; echo $? > {shlex.quote(status_file)}"]
    node_env = {**env, "GLOO_SOCKET_IFNAME": str(node.interface), "NCCL_SOCKET_IFNAME": str(node.interface)}
    pid = host.start_detached(wrapped, log, pid_file, env=node_env)
    return NodeRun(node, pid, log, status_file)


def read_status(host, run: NodeRun) -> str:  # orchestrator.hosts.base.Host
    return host.run(f"cat {shlex.quote(run.status_file)} 2>/dev/null", check=False, timeout_s=30).stdout.strip()


def wait_all(session: Session, runs: list[NodeRun], timeout_s: float) -> None:
    """Until every node's torchrun exited 0; the first failure, a vanished run or the deadline
    raises, naming the node."""
    deadline = time.monotonic() + timeout_s
    pending = {run.node.index: run for run in runs}
    while pending:
        for index, run in list(pending.items()):
            host = session.node_host(index)
            status = read_status(host, run)
            if not status and not host.group_pids(run.pid):
                status = read_status(host, run)  # it may have written its status and exited since
            if status == "0":
                del pending[index]
                continue
            if status or not host.group_pids(run.pid):
                why = f"exited with status {status}" if status else "vanished without an exit status"
                tail = tail_lines(host.read_text(run.log, 200_000), 30)
                signalled = RANK_KILLED.search(tail)
                if signalled:
                    why += f" ({signalled[0].removesuffix(' received by PID')}: a rank died from a signal)"
                # A rank killed by a signal, or the whole run killed (no status): run once more.
                error = RunKilled if not status or signalled else TaskFailed
                raise error(
                    f"the all-reduce run on {run.node.label} {why}; the other nodes' runs were stopped",
                    output_tail=tail,
                )
        if pending and time.monotonic() > deadline:
            names = ", ".join(run.node.label for run in pending.values())
            raise TaskFailed(
                f"the all-reduce run still ran on {names} after {timeout_s:.0f} s; stopped every"
                " node's run (a rank waiting for a peer that never came: check nodes.*.ip and"
                " nodes.*.interface)",
                output_tail=tail_lines(
                    session.node_host(next(iter(pending))).read_text(next(iter(pending.values())).log, 200_000), 30
                ),
            )
        if pending:
            time.sleep(1)
