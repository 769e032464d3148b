"""A plain command task: a shell command on the host, its output kept as an artifact.

For facts about the host (`nvidia-smi topo -m`, driver and library versions), and for quick
real campaigns in the engine's own tests.
"""

from __future__ import annotations

from typing import Any

from orchestrator.atomic import write_atomic
from orchestrator.campaign import TaskContext
from orchestrator.hosts.base import Host


def command_action(host_factory, command: str, timeout_s: float):  # noqa: ANN001
    def run(ctx: TaskContext) -> dict[str, Any]:
        host: Host = host_factory()
        result = host.run(command, timeout_s=timeout_s)
        artifact = ctx.artifacts_dir / "output.txt"
        write_atomic(artifact, (result.stdout + result.stderr).encode())
        return {"exit_code": result.exit_code, "artifact": str(artifact),
                "output_head": result.stdout[:2000]}

    return run
