"""The census after a server stops: port closed, none of its processes left, no GPU busy.

What `accelerators_free` promises a microbenchmark, checked on every node rather than assumed
from the stop having returned.
"""

from __future__ import annotations

from typing import Any

from orchestrator.errors import TaskFailed
from orchestrator.retry import poll_policy
from tasks.session import Node, Session


def confirm_free(session: Session, pgid: int | None, node: Node | None = None) -> dict[str, Any]:
    """The census after a stop: our port closed, no process of our server's group left, no GPU
    compute process listed, and no GPU holding memory. The last catches what the process list
    cannot: in a container nvidia-smi lists no processes of other PID namespaces, and a GPU can
    take a few seconds to release a killed process's memory (polled for up to 20 s)."""
    node = node or session.nodes[0]
    host = session.node_host(node.index)
    port_closed = node.index > 0 or not host.port_open(session.config.service.port)
    leftover = host.group_pids(pgid) if pgid else []
    gpu_apps = host.run(
        "command -v nvidia-smi >/dev/null && nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader",
        check=False,
        timeout_s=60,
    )
    apps = [line for line in gpu_apps.stdout.splitlines() if line.strip()] if gpu_apps.exit_code == 0 else []
    busy: list[str] = []

    def memory_released() -> bool:
        memory = host.run(
            "command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=index,memory.used,"
            "memory.total --format=csv,noheader,nounits",
            check=False,
            timeout_s=60,
        )
        busy[:] = busy_gpus(memory.stdout) if memory.exit_code == 0 else []
        return not busy

    if not apps:
        poll_policy(GPU_MEMORY_RELEASE_S, interval_s=1.0)(memory_released)
    if not port_closed or leftover or apps or busy:
        raise TaskFailed(
            f"accelerators not free on {host.name}: port open={not port_closed},"
            f" leftover pids={leftover}, GPU compute apps={apps}, GPU memory in use={busy}"
            " (stop what holds them; a microbenchmark on a busy accelerator is wrong)"
        )
    return {"port_closed": True, "leftover_pids": [], "gpu_compute_apps": apps, "gpu_memory_in_use": busy}


GPU_MEMORY_RELEASE_S = 20
GPU_MEMORY_FREE_MIB = 1024  # an idle H200 shows 0-4 MiB; a CUDA context alone is ~500 MiB


def busy_gpus(csv_text: str, limit_mib: int = GPU_MEMORY_FREE_MIB) -> list[str]:
    """GPUs holding more than ``limit_mib`` of memory, from `nvidia-smi --query-gpu=index,
    memory.used,memory.total --format=csv,noheader,nounits` ("0, 81510, 143771" a line)."""
    busy = []
    for line in csv_text.splitlines():
        fields = [part.strip() for part in line.split(",")]
        if len(fields) >= 2 and fields[1].isdigit() and int(fields[1]) > limit_mib:
            busy.append(f"GPU {fields[0]}: {fields[1]} MiB used")
    return busy
