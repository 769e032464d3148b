"""What every phase shares: the config, where things live, the host (made by the caller)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.hosts.base import Host

if TYPE_CHECKING:  # the sections' packages import this module: their types are for readers only
    from tasks.config_types import CampaignConfig


@dataclass(frozen=True)
class Node:
    """One host the server's ranks run on. A single-host campaign has one node: the host."""

    index: int
    name: str
    workdir: str
    python: str
    ip: str | None = None
    """The data-plane address (multi-node only)."""
    interface: str | None = None
    cpu_bind: str | None = None

    @property
    def label(self) -> str:
        return f"node {self.index} ({self.name})"


@dataclass
class Session:
    config: CampaignConfig
    """The campaign config: one attribute per unit section (built by tasks/config.py; its shape
    is tasks/config_types.py)."""
    state_path: Path
    reports_dir: Path
    host_factory: Callable[[], Host]
    """Builds the transport on first use; the application chooses it (local or SSH)."""
    config_file: str = "campaign.toml"
    """The config file the campaign came from, as errors name it (`--config other.toml`)."""
    enabled: frozenset[str] = frozenset()
    """The names of the units this campaign runs (asked for, and what they require)."""
    node_host_factory: Callable[[int], Host] | None = None
    """Builds the transport to node N > 0 of a multi-node campaign."""
    service_variant: str | None = None
    """An experiment's session: the server it launches is this variant of the campaign's (its own
    log and trace folder on the host; the one pid file, since one server holds the port)."""
    plans: dict[str, Any] = field(default_factory=dict, repr=False)
    """What is resolved once a campaign, not once a read: the decision rules (loaded and checked),
    the experiment plan. Shared with the experiments' variant sessions (the same campaign)."""
    _host: Host | None = field(default=None, repr=False)
    _node_hosts: dict[int, Host] = field(default_factory=dict, repr=False)
    _shipped: set[tuple[int, Path]] = field(default_factory=set, repr=False)

    @property
    def node_configs(self) -> list[Any]:
        return list(getattr(self.config, "nodes", None) or [])

    @property
    def multi_node(self) -> bool:
        return len(self.node_configs) > 1

    @property
    def nodes(self) -> list[Node]:
        """Every host the server's ranks run on, the head (node 0) first."""
        if not self.multi_node:
            host = self.config.host
            name = host.alias or host.hostname or ("localhost" if host.kind == "local" else "host")
            return [Node(0, name, self.workdir, self.python)]
        return [
            Node(
                index,
                node.alias or node.hostname,
                self._node_workdir(node),
                self._node_python(node),
                node.ip,
                node.interface,
                node.cpu_bind,
            )
            for index, node in enumerate(self.node_configs)
        ]

    def _node_workdir(self, node: Any) -> str:
        return node.workdir or self.config.host.workdir or "orchestrate-work"

    def _node_python(self, node: Any) -> str:
        return node.python or self.config.host.python or "python3"

    def node_host(self, index: int) -> Host:
        """The transport to node ``index`` (0 is the head, ``host()``)."""
        if index == 0:
            return self.host()
        if index not in self._node_hosts:
            if self.node_host_factory is None:
                raise RuntimeError("this session has no transport to other nodes")
            self._node_hosts[index] = self.node_host_factory(index)
        return self._node_hosts[index]

    @property
    def artifacts_dir(self) -> Path:
        """This campaign's raw artifacts: `artifacts/` beside `todo.json`, `artifacts-<name>/` beside
        any other todo file. Two campaigns whose todo files share a folder must not share these: a
        capture reuses the traces it finds there, and a level's requests file is named by its todo."""
        name = "artifacts" if self.state_path.name == "todo.json" else f"artifacts-{self.state_path.stem}"
        return (self.state_path.parent / name).absolute()

    @property
    def workdir(self) -> str:
        """Folder on the host for shipped scripts, logs, pid files, models and traces."""
        if self.multi_node:
            return self._node_workdir(self.node_configs[0])
        if self.config.host.workdir:
            return self.config.host.workdir
        if self.config.host.kind == "local":
            return str((self.state_path.parent / "host").absolute())
        return "orchestrate-work"  # relative to the remote user's home

    @property
    def python(self) -> str:
        """The host's python with torch and vLLM; the embedded default uses our own."""
        if self.multi_node:
            return self._node_python(self.node_configs[0])
        if self.config.host.python:
            return self.config.host.python
        import sys

        return sys.executable if self.config.host.kind == "local" else "python3"

    def variant(self, name: str, config: Any) -> Session:
        """A session for experiment ``name`` serving with ``config``: the same host connections
        (made once, shared) and enabled units, its own server identity."""
        return Session(
            config=config,
            state_path=self.state_path,
            reports_dir=self.reports_dir,
            host_factory=self.host,
            enabled=self.enabled,
            node_host_factory=self.node_host,
            service_variant=name,
            config_file=self.config_file,
            plans=self.plans,
            _node_hosts=self._node_hosts,
            _shipped=self._shipped,
        )

    def host(self) -> Host:
        if self._host is None:
            self._host = self.host_factory()
        return self._host

    def ship(self, script: Path, node: Node | None = None) -> str:
        """Copy a unit's host script to the host (or ``node``) once per session; its path there."""
        node = node or self.nodes[0]
        remote = f"{node.workdir}/scripts/{script.name}"
        if (node.index, script) not in self._shipped:
            self.node_host(node.index).put(script, remote)
            self._shipped.add((node.index, script))
        return remote

    def close(self) -> None:
        for host in self._node_hosts.values():
            host.close()
        self._node_hosts.clear()
        if self._host is not None:
            self._host.close()
            self._host = None
