"""The `host` unit: where the campaign runs, and what that machine is, recorded once.

Every later phase reads the typed ``HostFacts`` (accelerator kind honouring
`host.accelerator`, GPU count and names, topology, driver, CPU count, torch and vLLM versions)
instead of asking the host again.
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Literal

from pydantic import Field

from orchestrator.atomic import write_atomic
from orchestrator.campaign import TaskContext, TaskSpec
from orchestrator.schema import Priority
from tasks.host.results import HOST_FACTS, HostFacts, NodeFacts
from tasks.session import Session
from tasks.unit import PhaseUnit, Section


class HostSection(Section):
    kind: Literal["local", "ssh"] = "local"
    alias: str | None = Field(None, description="Host alias or name, looked up in ssh_config")
    hostname: str | None = None
    port: int = Field(22, ge=1, le=65535)
    user: str | None = None
    identity_file: str | None = None
    known_hosts: str = "~/.ssh/known_hosts"
    ssh_config: str | None = "~/.ssh/config"
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


FACTS_SCRIPT = r"""
echo "## uname"; uname -a
echo "## cpu"; (lscpu 2>/dev/null | head -20) || true
echo "## nproc"; nproc
echo "## gpus"; (nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null) || true
echo "## topology"; (nvidia-smi topo -m 2>/dev/null) || true
echo "## python"; PY -c 'import sys; print(sys.version.split()[0])'
echo "## torch"; PY -c 'import torch; print(torch.__version__, "cuda" if torch.cuda.is_available() else "cpu")' 2>/dev/null || echo "missing"
echo "## vllm"; PY -c 'from importlib.metadata import version as v
for name in ("vllm", "vllm-cpu"):
    try: print(name, v(name)); break
    except Exception: pass
else: print("missing")' 2>/dev/null
"""


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def parse_sections(text: str) -> dict[str, str]:
    """`## name` headed sections of the facts script's output (nvidia-smi's colour codes dropped)."""
    text = ANSI.sub("", text)
    sections: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
            sections[current] = ""
        elif current is not None:
            sections[current] += line + "\n"
    return {key: value.strip() for key, value in sections.items()}


def host_facts(text: str, configured: str, artifact: str) -> HostFacts:
    """The facts from the script's output; ``configured`` is `host.accelerator`."""
    sections = parse_sections(text)
    gpus = [line.strip() for line in sections.get("gpus", "").splitlines() if line.strip()]
    driver = gpus[0].split(",")[1].strip() if gpus and gpus[0].count(",") >= 2 else None
    detected = "cuda" if gpus else "cpu"
    return HostFacts(
        uname=sections.get("uname", ""),
        cpu=sections.get("cpu", ""),
        cpu_count=int(sections.get("nproc") or 1),
        accelerator=detected if configured == "auto" else configured,
        accelerator_source="nvidia-smi" if configured == "auto" else "config",
        gpu_count=len(gpus),
        gpus=gpus,
        driver=driver,
        topology=sections.get("topology") or None,
        python=sections.get("python", "?"),
        torch=sections.get("torch", "?"),
        vllm=sections.get("vllm", "?"),
        artifact=artifact,
    )


def node_facts(index: int, name: str, text: str, configured: str) -> NodeFacts:
    facts = host_facts(text, configured, "")
    return NodeFacts(
        index=index,
        name=name,
        hostname=parse_sections(text).get("hostname", "?"),
        cpu_count=facts.cpu_count,
        gpu_count=facts.gpu_count,
        gpus=facts.gpus,
        python=facts.python,
        torch=facts.torch,
        vllm=facts.vllm,
    )


def host_identity(config: Any) -> dict[str, Any]:
    """The host settings that change which machine (or Python) results come from."""
    identity = config.host.model_dump(
        include={"kind", "alias", "hostname", "port", "user", "workdir", "python", "accelerator", "env_setup"}
    )
    nodes = getattr(config, "nodes", [])
    return identity | ({"nodes": [node.model_dump() for node in nodes]} if nodes else {})


def _specs(session: Session, enabled: frozenset[str]) -> list[TaskSpec]:
    def run(ctx: TaskContext) -> HostFacts:
        outputs = []
        for node in session.nodes:
            script = FACTS_SCRIPT.replace("PY", shlex.quote(node.python)) + 'echo "## hostname"; uname -n\n'
            outputs.append(session.node_host(node.index).run(script, timeout_s=120).stdout)
        artifact = ctx.artifacts_dir / "host_facts.txt"
        write_atomic(artifact, "\n".join(outputs).encode())
        facts = host_facts(outputs[0], session.config.host.accelerator, str(artifact))
        if session.multi_node:
            facts.nodes = [
                node_facts(node.index, node.name, text, session.config.host.accelerator)
                for node, text in zip(session.nodes, outputs, strict=True)
            ]
        return facts

    return [
        TaskSpec(
            HOST_FACTS,
            "Record host, accelerators, interconnect, driver and versions",
            "host",
            run,
            priority=Priority.high,
            inputs={"host": host_identity(session.config)},
        )
    ]


def _checks(session: Session) -> list:
    from tasks.host.checks import host_checks

    return host_checks(session)


UNIT = PhaseUnit(
    name="host",
    specs=_specs,
    results=(HOST_FACTS,),
    config=HostSection,
    checks=_checks,
    extra_config={
        "nodes": (
            list[NodeSection],
            Field(
                default_factory=list,
                description=("the hosts of a multi-node campaign, head first; empty = the one [host]"),
            ),
        )
    },
)
