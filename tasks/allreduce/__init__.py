"""The `allreduce` unit: all-reduce across the TP ranks at decode sizes, with the server stopped."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from orchestrator.campaign import TaskSpec
from tasks.allreduce.results import ALLREDUCE_BENCH
from tasks.host.results import HOST_FACTS
from tasks.model.results import MODEL_FACTS
from tasks.session import Session
from tasks.unit import PhaseUnit, Section


class AllreduceSection(Section):
    decode_tokens: list[Annotated[int, Field(ge=1, le=65536)]] = Field(default_factory=lambda: [1, 8, 32], min_length=1)
    sweep_min_bytes: int = Field(1024, ge=4, le=1 << 34)
    sweep_max_bytes: int = Field(4 << 20, ge=4, le=1 << 34)
    iterations: int = Field(50, ge=3, le=100000)
    nccl_variants: bool = True

    @model_validator(mode="after")
    def _sweep_in_order(self) -> AllreduceSection:
        if self.sweep_min_bytes > self.sweep_max_bytes:
            raise ValueError("sweep_min_bytes is above sweep_max_bytes; swap them")
        return self


def _specs(session: Session, enabled: frozenset[str]) -> list[TaskSpec]:
    from tasks.allreduce.action import allreduce_action

    return [
        TaskSpec(
            ALLREDUCE_BENCH,
            "Benchmark all-reduce across the TP ranks at decode sizes",
            "allreduce",
            allreduce_action(session),
            depends_on=(HOST_FACTS, MODEL_FACTS),
            needs=("accelerators_free",),
            inputs={"allreduce": session.config.allreduce.model_dump()},
        )
    ]


def _section(findings) -> str:  # noqa: ANN001 - tasks.findings.Findings
    from tasks.allreduce.section import allreduce_section

    return allreduce_section(findings)


UNIT = PhaseUnit(
    name="allreduce",
    specs=_specs,
    results=(ALLREDUCE_BENCH,),
    config=AllreduceSection,
    requires=("host", "model"),
    section=_section,
)
