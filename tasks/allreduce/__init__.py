"""The `allreduce` unit: all-reduce across the TP ranks at decode sizes, with the server stopped."""

from __future__ import annotations

from orchestrator.campaign import TaskSpec
from tasks.allreduce.config import AllreduceSection
from tasks.allreduce.results import ALLREDUCE_BENCH
from tasks.host.results import HOST_FACTS
from tasks.model.results import MODEL_FACTS
from tasks.service.results import ACCELERATORS_FREE
from tasks.session import Session
from tasks.unit import PhaseUnit


def _specs(session: Session, enabled: frozenset[str]) -> list[TaskSpec]:
    from tasks.allreduce.action import allreduce_action

    return [
        TaskSpec(
            ALLREDUCE_BENCH,
            "Benchmark all-reduce across the TP ranks at decode sizes",
            "allreduce",
            allreduce_action(session),
            depends_on=(HOST_FACTS, MODEL_FACTS),
            needs=(ACCELERATORS_FREE,),
            inputs={"allreduce": session.config.allreduce.model_dump()},
        )
    ]


def _section(findings) -> str:  # tasks.view.Findings
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
