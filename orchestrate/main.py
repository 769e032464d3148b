"""Runs an LLM-inference profiling campaign on a GPU host, resumably, and writes down what it found.

`orchestrate` is the engine's CLI (orchestrator/cli.py) over the registered phase units.

Exit codes: 0 done; 1 a task failed (`resume` retries it); 2 bad input (config, state file,
trace, arguments); 3 the state is locked by another orchestrate; 4 the host could not be
reached or refused us; 130 interrupted (state saved).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from orchestrator import cli
from orchestrator.errors import InputError
from orchestrator.hosts.base import Host
from tasks.config import load_config
from tasks.plan import build_campaign
from tasks.session import Session
from tasks.unit import PhaseUnit


def host_for(config: Any, node: int = 0) -> Host:
    """The transport the config asks for: this machine, or SSH (paramiko, known hosts only); with
    `[[nodes]]`, node ``node`` over SSH with `[host]`'s SSH settings where the node sets none."""
    nodes = getattr(config, "nodes", None) or []
    setup = (nodes[node].env_setup if nodes else None) or config.host.env_setup
    if config.host.kind == "local":
        from orchestrator.hosts.local import LocalHost

        host: Host = LocalHost()
        host.env_setup = setup
        return host
    from orchestrator.hosts.ssh import SSHHost, SSHTarget

    cfg = config.host
    target, field = (nodes[node], f"nodes.{node}") if nodes else (cfg, "host")
    identity = target.identity_file or cfg.identity_file
    if identity and not Path(identity).expanduser().is_file():
        where = f"{field}.identity_file" if target.identity_file else "host.identity_file"
        raise InputError(
            f"{where}: {identity} is not a file here; name the private"
            " key SSH should use, or leave it out to use ssh_config and the agent"
        )
    alias = target.alias or target.hostname or ""
    host = SSHHost(
        SSHTarget(
            alias=alias,
            hostname=target.hostname or alias,
            port=target.port,
            user=target.user or cfg.user,
            identity_files=[identity] if identity else [],
            known_hosts=cfg.known_hosts,
            ssh_config=cfg.ssh_config,
        )
    )
    host.env_setup = setup
    return host


def opener(units: list[PhaseUnit]) -> cli.CampaignOpener:
    def open_campaign(config_path: Path | None, state_path: Path, reports_dir: Path) -> cli.OpenedCampaign:
        config, source = load_config(config_path, units)
        session = Session(
            config=config,
            state_path=state_path,
            reports_dir=reports_dir,
            config_file=source if source != "embedded default" else "campaign.toml",
            host_factory=lambda: host_for(config),
            node_host_factory=lambda index: host_for(config, index),
        )
        return cli.OpenedCampaign(build_campaign(session, units), source, session.close)

    return open_campaign


def main(argv: list[str] | None = None, units: list[PhaseUnit] | None = None) -> int:
    try:
        # The units read the files users edit (tasks/analysis/rules.toml) when they load: a
        # mistake there is one line and exit 2, as for any input, --version included.
        if units is None:
            from tasks.registry import UNITS

            units = UNITS
        from tasks.analysis.analyze_command import ANALYZE
        from tasks.decisions.ledger import LEDGER
        from tasks.synthesis.compare_command import COMPARE
    except InputError as err:
        print(f"orchestrate: error: {err}", file=sys.stderr)
        return err.exit_code

    return cli.main(
        argv,
        opener(units),
        description=__doc__.splitlines()[0],
        extra={"compare": COMPARE, "analyze": ANALYZE, "ledger": LEDGER},
    )


if __name__ == "__main__":
    sys.exit(main())
