"""The campaign configuration (`campaign.toml`), validated by pydantic, unknown keys rejected.

With no file, every default below together is the embedded default campaign: this machine,
the generated tiny Llama, vLLM's CPU build at tensor-parallel 2.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestrator.errors import InputError
from orchestrator.validation import one_line

ALL_PHASES = ("service", "macro", "gemm", "allreduce", "profile", "analysis")


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CampaignSection(Section):
    name: str = Field("default", pattern=r"^[A-Za-z0-9_.-]+$")
    phases: list[Literal["service", "macro", "gemm", "allreduce", "profile", "analysis"]] = Field(
        default_factory=lambda: list(ALL_PHASES)
    )
    max_attempts: int = Field(3, ge=1, le=100)


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


class ServiceSection(Section):
    model: str | None = Field(None, description="model path/name on the host; None = generated tiny model")
    served_model_name: str | None = None
    tensor_parallel: int = Field(2, ge=1, le=64)
    port: int = Field(8000, ge=1, le=65535)
    launcher: Literal["auto", "vllm-serve", "vllm-cpu"] = "auto"
    command: list[str] | None = Field(None, description="full launch command template; {model} {port} {tp} {profiler_config} are filled")
    extra_args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    max_model_len: int = Field(1024, ge=16)
    ready_deadline_s: float = Field(3600, gt=0)
    stop_grace_s: float = Field(60, gt=0)


class MacroSection(Section):
    input_tokens: int = Field(64, ge=1)
    output_tokens: int = Field(64, ge=2)
    warmup_requests: int = Field(2, ge=0)
    single_stream_requests: int = Field(8, ge=1)
    concurrency_max: int = Field(8, ge=1)
    requests_per_level: int = Field(16, ge=1, description="requests per concurrency level (at least the level)")


class GemmSection(Section):
    batch_sizes: list[int] = Field(default_factory=lambda: [1, 8, 32])
    repeats: int = Field(20, ge=3)
    int4_group_size: int = 128
    compare_w4a16: bool = Field(True, description="also time W4A16 for bf16 layers: what quantizing would buy")


class AllreduceSection(Section):
    decode_tokens: list[int] = Field(default_factory=lambda: [1, 8, 32])
    sweep_min_bytes: int = Field(1024, ge=4)
    sweep_max_bytes: int = Field(4 << 20, ge=4)
    iterations: int = Field(50, ge=3)
    nccl_variants: bool = True


class ProfileSection(Section):
    warmup_requests: int = Field(2, ge=0)
    requests: int = Field(4, ge=1)
    output_tokens: int = Field(32, ge=2)
    stop_timeout_s: float = Field(3600, gt=0)


class CommandTask(Section):
    id: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    content: str
    run: str
    depends_on: list[str] = Field(default_factory=list)
    priority: Literal["high", "medium", "low"] = "medium"
    timeout_s: float = Field(600, gt=0)


class CampaignConfig(Section):
    campaign: CampaignSection = Field(default_factory=CampaignSection)
    host: HostSection = Field(default_factory=HostSection)
    service: ServiceSection = Field(default_factory=ServiceSection)
    macro: MacroSection = Field(default_factory=MacroSection)
    gemm: GemmSection = Field(default_factory=GemmSection)
    allreduce: AllreduceSection = Field(default_factory=AllreduceSection)
    profile: ProfileSection = Field(default_factory=ProfileSection)
    commands: list[CommandTask] = Field(default_factory=list)

    def host_python(self) -> str:
        if self.host.python:
            return self.host.python
        # The embedded default runs on this machine, whose vllm-cpu lives beside us.
        return sys.executable if self.host.kind == "local" else "python3"


def load_config(path: Path | None) -> tuple[CampaignConfig, str]:
    """The config at ``path`` (or ./campaign.toml, or the embedded default) and where it came from."""
    explicit = path is not None
    path = path or Path("campaign.toml")
    if not path.exists():
        if explicit:
            raise InputError(f"{path}: no such config file; check --config")
        return CampaignConfig(), "embedded default"
    fix = "see campaign.example.toml for the keys and their meaning"
    try:
        document = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise InputError(f"{path}: not valid TOML ({err}); fix the syntax there") from None
    try:
        config = CampaignConfig.model_validate(document)
    except ValidationError as err:
        raise InputError(one_line(err, path, fix)) from None
    if config.host.kind == "ssh" and not (config.host.alias or config.host.hostname):
        raise InputError(f"{path}: field 'host.alias': required when host.kind = 'ssh'; name the host")
    return config, str(path)
