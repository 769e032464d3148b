"""The vLLM server's lifecycle on the host: adopt or launch, follow the load, stop.

Two needs for the engine: ``service`` (the server answers with our model) and
``accelerators_free`` (no server of ours holds the GPUs/cores). They conflict, and the
runner groups tasks by need, so a campaign loads the model once.
"""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass, field
from typing import Any

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from orchestrator.campaign import TaskContext
from orchestrator.errors import TaskFailed, tail_lines
from orchestrator.retry import poll_policy
from tasks.host.results import HOST_FACTS, HostFacts
from tasks.service.census import confirm_free
from tasks.service.launch import (
    VLLM_CLI_SCRIPT,
    launch_plan,
    profiler_dir,
    served_name,
    service_identity_path,
    service_log_path,
    service_pid_path,
)
from tasks.service.vllm_log import LoadProgress
from tasks.session import Node, Session

LOG_TAIL_LINES = 40


@dataclass
class ServiceState:
    """What this controller knows of the server in this process."""

    pid: int | None = None
    adopted: bool = False
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass
class LogFollower:
    """A server log on a host read as it grows, each new part fed to its LoadProgress."""

    host: Any
    path: str
    progress: LoadProgress
    offset: int = 0

    def read_new(self) -> LoadProgress:
        chunk = self.host.run(
            f"tail -c +{self.offset + 1} {shlex.quote(self.path)} 2>/dev/null", check=False, timeout_s=60
        ).stdout
        self.offset += len(chunk.encode())
        self.progress.feed(chunk)
        return self.progress


class ServiceLifecycle:
    def __init__(self, session: Session) -> None:
        self.session = session
        self.known = ServiceState()

    # -- paths on the host ----------------------------------------------------------------
    @property
    def log_path(self) -> str:
        return service_log_path(self.session)

    @property
    def identity(self) -> str:
        """Which of the campaign's servers this lifecycle runs: 'base' or an experiment's name."""
        return self.session.service_variant or "base"

    def running_identity(self) -> str:
        """The identity our launched server was started with ('base' for one started before
        identities were written)."""
        text = self.session.host().read_text(service_identity_path(self.session), 1000)
        return text.strip() or "base"

    @property
    def pid_path(self) -> str:
        return service_pid_path(self.session)

    # -- probes ---------------------------------------------------------------------------
    def serving_model(self) -> str | None:
        """The model id the port serves, or None when nothing healthy answers there."""
        port = self.session.config.service.port
        host = self.session.host()
        status, _ = host.http_get(port, "/health", timeout_s=3)
        if status != 200:
            return None
        status, body = host.http_get(port, "/v1/models", timeout_s=5)
        if status != 200:
            return None
        try:
            return json.loads(body)["data"][0]["id"]
        except (ValueError, KeyError, IndexError, TypeError):
            return None

    def our_pid(self, node: Node | None = None) -> int | None:
        """The process group of the server we launched (on the head, or ``node``) while any of it
        lives: when its leader (the API server) dies, the engine and the TP workers may live on,
        holding the GPUs."""
        node = node or self.session.nodes[0]
        host = self.session.node_host(node.index)
        pid = host.read_pid(service_pid_path(self.session, node))
        if pid is None:
            return None
        return pid if host.is_alive(pid) or host.group_pids(pid) else None

    def node_pids(self) -> list[tuple[Node, int | None]]:
        """Each node's server process group (None where none of ours lives)."""
        return [(node, self.our_pid(node)) for node in self.session.nodes]

    def node_log_tail(self, node: Node) -> str:
        host = self.session.node_host(node.index)
        return self.masked(tail_lines(host.read_text(service_log_path(self.session, node), 200_000), LOG_TAIL_LINES))

    def masked(self, text: str) -> str:
        """The server may print its environment: `service.env` values stay in its own log on
        the host, never in a message, the todo file or the findings."""
        for secret in self.session.config.service.env.values():
            if len(secret) >= 4:
                text = text.replace(secret, "***")
        return text

    def stop_leaderless(self, ctx: TaskContext, pid: int) -> None:
        """What is left of a server whose leader died: stopped, so a new one can be launched."""
        host = self.session.host()
        ctx.log(
            f"the server we launched (process group {pid}) lost its API server; stopping"
            f" what is left of it ({len(host.group_pids(pid))} processes)"
        )
        if not host.stop_group(pid, grace_s=self.session.config.service.stop_grace_s):
            raise TaskFailed(f"vLLM process group {pid} on {host.name} survived SIGKILL")
        host.run(f"rm -f {shlex.quote(self.pid_path)}", check=False, timeout_s=30)
        self.stop_nodes()  # multi-node: the other nodes' parts too, before all are launched again

    # -- the need "service" ---------------------------------------------------------------
    def stop_other_variant(self, ctx: TaskContext) -> None:
        """A server of ours launched for another variant (the campaign's, or another
        experiment's) holds the port and the accelerators: stopped, so this one can launch."""
        pid = self.our_pid()
        if pid is None:
            return
        other = self.running_identity()
        if other == self.identity:
            return
        ctx.log(f"stopping the '{other}' server (process group {pid}) to launch the '{self.identity}' one")
        self.stop_nodes()
        self.known = ServiceState()

    def ensure_running(self, ctx: TaskContext) -> dict[str, Any]:
        self.stop_other_variant(ctx)
        served = self.serving_model()
        expected = served_name(self.session)
        if self.session.multi_node and self.settle_nodes(ctx):
            served = self.serving_model()
        if self.known.facts and served == expected:
            return self.known.facts  # already up in this process: nothing to do
        if served is not None and self.session.service_variant and self.our_pid() is None:
            raise TaskFailed(
                f"port {self.session.config.service.port} on {self.session.host().name} is held by a server"
                f" this campaign did not launch; experiment '{self.identity}' launches its own server"
                " with the option applied, so stop that one first"
            )
        if served is not None:
            if served != expected:
                raise TaskFailed(
                    f"port {self.session.config.service.port} on {self.session.host().name} serves"
                    f" '{served}', not '{expected}'; stop that server or set service.port"
                )
            pid = self.our_pid()
            ctx.log(f"adopting the server already serving {expected}" + (f" (pid {pid})" if pid else ""))
            self.known = ServiceState(
                pid=pid, adopted=pid is None, facts={"adopted": True, "pid": pid, "model": expected}
            )
            return self.known.facts
        pid = self.our_pid()
        if pid is not None and not self.session.host().is_alive(pid):
            self.stop_leaderless(ctx, pid)
            pid = None
        if pid is not None:
            # A controller crash during a long load: follow the load already under way.
            ctx.log(f"a server we launched (pid {pid}) is still loading; following it")
            launched_at = None
        else:
            if self.session.host().port_open(self.session.config.service.port):
                raise TaskFailed(
                    f"port {self.session.config.service.port} on {self.session.host().name} is taken"
                    " by a process we did not launch and that is not a healthy vLLM; stop it or"
                    " set service.port"
                )
            pid = self.launch(ctx, ctx.input(HOST_FACTS))
            launched_at = time.time()
        facts = self.follow_load(ctx, pid)
        facts |= {
            "adopted": False,
            "pid": pid,
            "model": expected,
            "launched_at_epoch_s": launched_at,
            "log": self.log_path,
        }
        self.known = ServiceState(pid=pid, adopted=False, facts=facts)
        return facts

    def launch(self, ctx: TaskContext, facts: HostFacts) -> int:
        """Start the server: on the host, or its part on every node at once (the head first);
        the head's process group id."""
        pids = []
        for node in self.session.nodes:
            plan = launch_plan(self.session, facts, node)
            if self.session.multi_node:
                self.session.ship(VLLM_CLI_SCRIPT, node)
            host = self.session.node_host(node.index)
            host.run(f"mkdir -p {shlex.quote(profiler_dir(self.session, node))}", timeout_s=30)
            pids.append(
                host.start_detached(
                    plan.argv, service_log_path(self.session, node), service_pid_path(self.session, node), env=plan.env
                )
            )
            if node.index == 0:
                host.run(
                    f"printf '%s\\n' {shlex.quote(self.identity)} > {shlex.quote(service_identity_path(self.session))}",
                    timeout_s=30,
                )
            where = f" on {node.label}" if self.session.multi_node else ""
            ctx.log(f"launched {plan.launcher} server pid {pids[-1]}{where}: {shlex.join(plan.argv)}")
        return pids[0]

    def settle_nodes(self, ctx: TaskContext) -> bool:
        """Multi-node: a server whose part on some node is gone cannot serve (the head answers
        503 once a worker dies) and is not followed: every node's part is stopped, so the
        caller launches them all again. True when something was stopped."""
        pids = self.node_pids()
        dead = [node for node, pid in pids if pid is None]
        if not dead or len(dead) == len(pids):
            return False
        ctx.log(
            f"the server's part on {', '.join(node.label for node in dead)} is gone; stopping the other"
            " nodes' parts to relaunch them all"
        )
        self.stop_nodes()
        return True

    def stop_nodes(self) -> list[tuple[Node, int]]:
        """Stop every node's process group of ours (TERM, then KILL after service.stop_grace_s)."""
        stopped = []
        for node, pid in self.node_pids():
            if pid is None:
                continue
            host = self.session.node_host(node.index)
            if not host.stop_group(pid, grace_s=self.session.config.service.stop_grace_s):
                raise TaskFailed(f"vLLM process group {pid} on {node.label} survived SIGKILL")
            host.run(f"rm -f {shlex.quote(service_pid_path(self.session, node))}", check=False, timeout_s=30)
            stopped.append((node, pid))
        return stopped

    def follow_load(self, ctx: TaskContext, pid: int) -> dict[str, Any]:
        """Poll /health and the log until ready; fail within a poll of a death or fatal line."""
        host = self.session.host()
        cfg = self.session.config.service
        progress = LoadProgress()
        started = time.monotonic()
        health_seen_at: float | None = None
        head_log = LogFollower(host, self.log_path, progress)
        workers = {
            node.index: LogFollower(
                self.session.node_host(node.index), service_log_path(self.session, node), LoadProgress()
            )
            for node in self.session.nodes[1:]
        }

        def log_tail() -> str:
            return self.masked(tail_lines(host.read_text(self.log_path, 200_000), LOG_TAIL_LINES))

        def read_log() -> None:
            seen = len(progress.phases_seen)
            head_log.read_new()
            for phase in progress.phases_seen[seen:]:
                detail = progress.describe() if phase == progress.phase else phase
                ctx.log(f"vLLM: {detail} ({time.monotonic() - started:.0f} s)")

        def poll() -> bool:
            nonlocal health_seen_at
            read_log()
            bar.update(task, completed=progress.shard_percent or 0, description=progress.describe())
            if progress.fatal_line:
                time.sleep(1)  # let the rest of the traceback reach the log
                read_log()
                raise TaskFailed(
                    f"vLLM failed to start on {host.name}: {self.masked(progress.failure())}", output_tail=log_tail()
                )
            status, _ = host.http_get(cfg.port, "/health", timeout_s=2)
            if status == 200:
                health_seen_at = time.monotonic()
                return True
            if not host.is_alive(pid):
                raise TaskFailed(f"vLLM (pid {pid}) exited during start on {host.name}", output_tail=log_tail())
            self.check_worker_nodes(workers)
            return False

        with Progress(
            TextColumn("[bold]vLLM[/bold] {task.description}"),
            BarColumn(),
            TextColumn("{task.percentage:>3.0f}%"),
            TimeElapsedColumn(),
            transient=True,
        ) as bar:
            task = bar.add_task(progress.describe(), total=100)
            ready = poll_policy(cfg.ready_deadline_s)(poll)
        if not ready:
            raise TaskFailed(
                f"vLLM not ready on {host.name} after {cfg.ready_deadline_s:.0f} s"
                f" (last phase: {progress.describe()}); raise service.ready_deadline_s"
                " or read the log",
                output_tail=log_tail(),
            )
        read_log()  # the lines written between the last read and /health turning 200
        if progress.phase != "ready":
            progress.phase = "ready"
            ctx.log(f"vLLM: ready ({time.monotonic() - started:.0f} s)")
        served = self.serving_model()
        if served != served_name(self.session):
            raise TaskFailed(f"server on port {cfg.port} is healthy but serves {served!r}")
        ready_s = time.monotonic() - started
        ctx.log(f"ready after {ready_s:.1f} s ({progress.describe()})")
        return {"ready_s": round(ready_s, 2), "health_seen_monotonic": health_seen_at, "load": progress.summary()}

    def check_worker_nodes(self, workers: dict[int, LogFollower]) -> None:
        """During a multi-node start: every worker node's process alive, no fatal line in its log."""
        for node in self.session.nodes[1:]:
            progress = workers[node.index].read_new()
            if progress.fatal_line:
                time.sleep(1)
                progress = workers[node.index].read_new()
                raise TaskFailed(
                    f"vLLM failed to start on {node.label}: {self.masked(progress.failure())}",
                    output_tail=self.node_log_tail(node),
                )
            if self.our_pid(node) is None:
                raise TaskFailed(f"vLLM exited during start on {node.label}", output_tail=self.node_log_tail(node))

    # -- the need "accelerators_free" -----------------------------------------------------
    def ensure_stopped(self, ctx: TaskContext | None = None) -> dict[str, Any]:
        """Every node's server of ours stopped (its process group, TERM then KILL), then the
        census on every node."""
        stopped = self.stop_nodes()
        head = self.session.nodes[0]
        if not stopped and self.known.pid is not None:
            # Its pid file is gone but this process launched it: stop it all the same.
            host = self.session.host()
            if not host.stop_group(self.known.pid, grace_s=self.session.config.service.stop_grace_s):
                raise TaskFailed(f"vLLM process group {self.known.pid} on {host.name} survived SIGKILL")
            stopped = [(head, self.known.pid)]
        elif not stopped and self.serving_model() is not None:
            raise TaskFailed(
                f"a server we did not launch answers on port {self.session.config.service.port}"
                f" on {self.session.host().name}; stop it yourself so the microbenchmarks get the accelerators"
            )
        self.known = ServiceState()
        pids = {node.index: pid for node, pid in stopped}
        census = [confirm_free(self.session, pids.get(node.index), node) for node in self.session.nodes]
        result = {"stopped_pid": pids.get(0), **census[0]}
        if self.session.multi_node:
            result["nodes"] = [
                {"node": node.name, "stopped_pid": pids.get(node.index), **free}
                for node, free in zip(self.session.nodes, census, strict=True)
            ]
        return result
