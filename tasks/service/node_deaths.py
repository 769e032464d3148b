"""A multi-node server that lost a node: which node died, named with its own log.

The head alone answers 503 and logs only that its engine died, so the failure of a level or a
capture names the node whose server is gone, with that node's log's last lines."""

from __future__ import annotations

from orchestrator.errors import TaskFailed
from tasks.service.launch import service_log_path
from tasks.service.lifecycle import ServiceLifecycle
from tasks.session import Node, Session


def dead_nodes(lifecycle: ServiceLifecycle) -> list[Node]:
    """Nodes whose part of a multi-node server is gone (empty for one host)."""
    if not lifecycle.session.multi_node:
        return []
    return [node for node, pid in lifecycle.node_pids() if pid is None]


def fail_if_node_died(session: Session, during: str) -> None:
    """A node's server died: fail naming it, with its log's last lines. One node's death takes
    the others down after it (seen in CI: node 1 SIGKILLed, and by the next poll of a loaded
    machine the head had exited too, and was named): with several gone, the one named first is
    the one whose log was last written earliest (a killed server writes nothing more; the others
    log their engine's death before they exit), the others after it."""
    lifecycle = ServiceLifecycle(session)
    dead = dead_nodes(lifecycle)
    if not dead:
        return
    if len(dead) > 1:
        dead.sort(key=lambda node: log_written_at(session, node))
    first, *after = dead
    then = f"; then on {', '.join(node.label for node in after)}" if after else ""
    raise TaskFailed(
        f"vLLM on {first.label} exited {during}{then}; `orchestrate resume` relaunches every node",
        output_tail=lifecycle.node_log_tail(first),
    )


def log_written_at(session: Session, node: Node) -> float:
    """When the node's server log was last written, by the node's clock (inf if unknown)."""
    answer = session.node_host(node.index).run(
        [node.python, "-c", "import os, sys; print(os.stat(sys.argv[1]).st_mtime)", service_log_path(session, node)],
        check=False,
        timeout_s=30,
    )
    try:
        return float(answer.stdout.strip())
    except ValueError:
        return float("inf")
