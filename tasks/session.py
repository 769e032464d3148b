"""What every phase shares: the config, where things live, and the (lazily connected) host."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.hosts.base import Host
from orchestrator.hosts.local import LocalHost
from tasks.config import CampaignConfig

REMOTE_SCRIPTS = Path(__file__).parent / "remote"


@dataclass
class Session:
    config: CampaignConfig
    state_path: Path
    reports_dir: Path
    _host: Host | None = field(default=None, repr=False)
    _shipped: set[str] = field(default_factory=set, repr=False)

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
        return self.config.host_python()

    def host(self) -> Host:
        if self._host is None:
            if self.config.host.kind == "local":
                self._host = LocalHost()
            else:
                from orchestrator.hosts.ssh import SSHHost, SSHTarget

                cfg = self.config.host
                alias = cfg.alias or cfg.hostname or ""
                self._host = SSHHost(SSHTarget(
                    alias=alias, hostname=cfg.hostname or alias, port=cfg.port, user=cfg.user,
                    identity_files=[cfg.identity_file] if cfg.identity_file else [],
                    known_hosts=cfg.known_hosts, ssh_config=cfg.ssh_config,
                ))
        return self._host

    def ship(self, script_name: str) -> str:
        """Copy a script from tasks/remote/ to the host once per session; its host path."""
        remote = f"{self.workdir}/scripts/{script_name}"
        if script_name not in self._shipped:
            self.host().put(REMOTE_SCRIPTS / script_name, remote)
            self._shipped.add(script_name)
        return remote

    def close(self) -> None:
        if self._host is not None:
            self._host.close()
            self._host = None
