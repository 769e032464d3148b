"""The `gemm` unit: the decode GEMMs at the model's per-rank shapes, with the server stopped."""

from __future__ import annotations

from orchestrator.campaign import TaskSpec
from tasks.gemm.config import GemmSection
from tasks.gemm.results import GEMM_BENCH
from tasks.host.results import HOST_FACTS
from tasks.macro.results import MACRO_SINGLE
from tasks.model.results import MODEL_FACTS
from tasks.service.results import ACCELERATORS_FREE, SERVICE_READY
from tasks.session import Session
from tasks.unit import PhaseUnit


def _specs(session: Session, enabled: frozenset[str]) -> list[TaskSpec]:
    from tasks.gemm.action import gemm_action

    # After the server ran (when it is part of the campaign): its log names the kernels to time.
    server = (SERVICE_READY,) if "service" in enabled else ()
    # After the single stream (where it runs): the GPU drafter micro drafts over its recorded outputs.
    single = (MACRO_SINGLE,) if "macro" in enabled else ()
    return [
        TaskSpec(
            GEMM_BENCH,
            "Microbenchmark the decode GEMMs at the model's per-rank shapes",
            "gemm",
            gemm_action(session),
            depends_on=(HOST_FACTS, MODEL_FACTS, *server, *single),
            optional=(SERVICE_READY, MACRO_SINGLE),
            needs=(ACCELERATORS_FREE,),
            inputs={"gemm": session.config.gemm.model_dump()},
        )
    ]


def _section(findings) -> str:  # tasks.view.Findings
    from tasks.gemm.section import gemm_section

    return gemm_section(findings)


UNIT = PhaseUnit(
    name="gemm", specs=_specs, results=(GEMM_BENCH,), config=GemmSection, requires=("host", "model"), section=_section
)
