"""The `gemm` unit: the decode GEMMs at the model's per-rank shapes, with the server stopped."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from orchestrator.campaign import TaskSpec
from tasks.session import Session
from tasks.unit import PhaseUnit, Section


class GemmSection(Section):
    batch_sizes: list[Annotated[int, Field(ge=1, le=65536)]] = Field(default_factory=lambda: [1, 8, 32],
                                                                       min_length=1)
    repeats: int = Field(20, ge=3, le=10000)
    int4_group_size: Literal[32, 64, 128, 256] = 128
    compare_w4a16: bool = Field(True, description="also time W4A16 for bf16 layers: what quantizing would buy")


def _specs(session: Session, enabled: frozenset[str]) -> list[TaskSpec]:
    from tasks.gemm.action import gemm_action
    from tasks.gemm.results import GemmResult

    # After the server ran (when it is part of the campaign): its log names the kernels to time.
    server = ("service_ready",) if "service" in enabled else ()
    return [TaskSpec("gemm_bench", "Microbenchmark the decode GEMMs at the model's per-rank shapes",
                     "gemm", gemm_action(session), depends_on=("host_facts", "model_facts", *server),
                     needs=("accelerators_free",), result_model=GemmResult,
                     inputs={"gemm": session.config.gemm.model_dump()})]


def _section(findings) -> str:  # noqa: ANN001 - tasks.findings.Findings
    from tasks.gemm.section import gemm_section

    return gemm_section(findings)


UNIT = PhaseUnit(name="gemm", specs=_specs, config=GemmSection, requires=("host", "model"),
                 section=_section)
