"""What every phase shares: the config, where things live, the host (made by the caller)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.hosts.base import Host


@dataclass
class Session:
    config: Any
    """The campaign config: one attribute per unit section (see tasks/config.py)."""
    state_path: Path
    reports_dir: Path
    host_factory: Callable[[], Host]
    """Builds the transport on first use; the application chooses it (local or SSH)."""
    enabled: frozenset[str] = frozenset()
    """The names of the units this campaign runs (asked for, and what they require)."""
    _host: Host | None = field(default=None, repr=False)
    _shipped: set[Path] = field(default_factory=set, repr=False)

    @property
    def artifacts_dir(self) -> Path:
        return (self.state_path.parent / "artifacts").absolute()

    @property
    def workdir(self) -> str:
        """Folder on the host for shipped scripts, logs, pid files, models and traces."""
        if self.config.host.workdir:
            return self.config.host.workdir
        if self.config.host.kind == "local":
            return str((self.state_path.parent / "host").absolute())
        return "orchestrate-work"  # relative to the remote user's home

    @property
    def python(self) -> str:
        """The host's python with torch and vLLM; the embedded default uses our own."""
        if self.config.host.python:
            return self.config.host.python
        import sys

        return sys.executable if self.config.host.kind == "local" else "python3"

    def host(self) -> Host:
        if self._host is None:
            self._host = self.host_factory()
        return self._host

    def ship(self, script: Path) -> str:
        """Copy a unit's host script to the host once per session; its host path."""
        remote = f"{self.workdir}/scripts/{script.name}"
        if script not in self._shipped:
            self.host().put(script, remote)
            self._shipped.add(script)
        return remote

    def close(self) -> None:
        if self._host is not None:
            self._host.close()
            self._host = None
