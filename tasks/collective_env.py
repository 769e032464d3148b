"""The environment of every process this project starts that runs collectives on the host: the
server and the all-reduce bench's torchrun.

On a CUDA host NVLink multicast is off by default in NCCL, PyTorch and NVSHMEM: a program that
creates multicast objects on a host whose GPUs others share can put those GPUs out of service
for a day or more (the lent H200 machines forbid it), and NVLS also needs the fabric manager's
multicast support that a VM may not have. A user who runs NVLS in production turns it back on
in `service.env` (e.g. `NCCL_NVLS_ENABLE = "1"`). The bench then takes the server's
`service.env` whole, so the all-reduce it times is the one the server runs (the same NCCL
settings, the same visible devices)."""

from __future__ import annotations

from collections.abc import Mapping

NVLINK_MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def collective_defaults(accelerator: str) -> dict[str, str]:
    """What a server or torchrun on this host gets before the user's own settings."""
    return dict(NVLINK_MULTICAST_OFF) if accelerator == "cuda" else {}


def bench_env(accelerator: str, service_env: Mapping[str, str]) -> dict[str, str]:
    """The all-reduce bench's environment: the defaults, then the server's `service.env`."""
    return collective_defaults(accelerator) | dict(service_env)
