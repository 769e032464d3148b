"""The `[host]` section of campaign.toml: its keys, defaults and limits."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tasks.models import NOT_AN_INPUT, Section


class HostSection(Section):
    kind: Literal["local", "ssh"] = "local"
    alias: str | None = Field(None, description="Host alias or name, looked up in ssh_config")
    hostname: str | None = None
    port: int = Field(22, ge=1, le=65535)
    user: str | None = None
    identity_file: str | None = Field(None, json_schema_extra=NOT_AN_INPUT)
    known_hosts: str = Field("~/.ssh/known_hosts", json_schema_extra=NOT_AN_INPUT)
    ssh_config: str | None = Field("~/.ssh/config", json_schema_extra=NOT_AN_INPUT)
    workdir: str | None = Field(None, description="folder on the host for scripts, logs, traces")
    python: str | None = Field(None, description="python on the host that has torch and vllm")
    accelerator: Literal["auto", "cuda", "cpu"] = "auto"
    env_setup: str | None = Field(
        None,
        description=(
            "a shell line run before every command on the host, e.g. 'source ~/venv/bin/activate' or"
            " 'export HF_HOME=/data/hf': commands over SSH run in a shell that reads no rc file"
        ),
    )


class NodeSection(Section):
    """One host of a multi-node campaign (`[[nodes]]`; node 0 is the head). Reached over SSH with
    `[host]`'s known_hosts, ssh_config, user and identity_file unless set here."""

    alias: str | None = Field(None, description="SSH alias or host name, looked up in ssh_config")
    hostname: str | None = None
    port: int = Field(22, ge=1, le=65535)
    user: str | None = None
    identity_file: str | None = None
    ip: str = Field(
        description="the node's data-plane address: VLLM_HOST_IP, and the head's is the"
        " rendezvous address of the server and of torchrun"
    )
    interface: str = Field(
        description="the network interface of that address: GLOO_SOCKET_IFNAME and"
        " NCCL_SOCKET_IFNAME (without it gloo may pick 127.0.0.1 and hang)"
    )
    python: str | None = Field(None, description="this node's python; host.python by default")
    workdir: str | None = Field(None, description="this node's folder; host.workdir by default")
    env_setup: str | None = Field(None, description="this node's host.env_setup; host.env_setup by default")
    cpu_bind: str | None = Field(
        None,
        description="vllm-cpu: VLLM_CPU_OMP_THREADS_BIND for this node's ranks"
        " (default: its cores split evenly between them)",
    )
