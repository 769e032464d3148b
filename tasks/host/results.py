"""The `host` unit's refs and result models: what the machine is, recorded once."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from orchestrator.refs import TaskRef
from tasks.models import Result


class NodeFacts(Result):
    """What one node of a multi-node campaign is (its share of the ranks runs on it)."""

    index: int
    name: str
    hostname: str
    cpu_count: int
    gpu_count: int
    gpus: list[str]
    python: str
    torch: str
    vllm: str


class HostFacts(Result):
    uname: str
    cpu: str = Field(description="lscpu, first lines")
    cpu_count: int
    accelerator: Literal["cuda", "cpu"]
    accelerator_source: Literal["config", "nvidia-smi"]
    gpu_count: int
    gpus: list[str] = Field(description="name, driver, memory of each GPU (nvidia-smi)")
    driver: str | None
    topology: str | None = Field(description="nvidia-smi topo -m, when there are GPUs")
    python: str
    torch: str
    vllm: str
    artifact: str
    nodes: list[NodeFacts] = Field(default_factory=list, description="every node of a multi-node campaign")

    @property
    def hardware(self) -> str:
        """What a result was measured on, in a few words: the first GPU's name, else lscpu's
        model name (its first line is only the architecture)."""
        if self.gpus:
            return f"{self.gpu_count}x {self.gpus[0].split(',')[0].strip()}"
        for line in self.cpu.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "Model name" and value.strip():
                return f"{value.strip()} ({self.cpu_count} CPUs)"
        return f"{self.cpu_count} CPUs"


HOST_FACTS = TaskRef("host_facts", HostFacts)
