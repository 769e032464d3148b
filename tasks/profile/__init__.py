"""The `profile` unit: decode steps captured with torch.profiler through vLLM's own endpoints.

The server is launched with `--profiler-config` whenever this unit is enabled, so the capture
shares the benchmarks' model load.
"""

from __future__ import annotations

from orchestrator.campaign import TaskSpec
from orchestrator.schema import Priority
from tasks.macro.results import MACRO_SWEEP
from tasks.model.results import MODEL_FACTS
from tasks.profile.config import ProfileSection
from tasks.profile.results import PROFILE_CAPTURE
from tasks.service.results import SERVICE, SERVICE_READY
from tasks.session import Session
from tasks.unit import PhaseUnit


def _specs(session: Session, enabled: frozenset[str]) -> list[TaskSpec]:
    from tasks.profile.capture import capture_action

    after = MACRO_SWEEP if "macro" in enabled else SERVICE_READY
    inputs = {
        "profile": session.config.profile.inputs_for(PROFILE_CAPTURE.id),
        "macro": {"input_tokens": session.config.macro.input_tokens},
    }
    return [
        TaskSpec(
            PROFILE_CAPTURE,
            "Capture decode steps with torch.profiler through vLLM",
            "profile",
            capture_action(session),
            depends_on=(after,),
            needs=(SERVICE,),
            optional=(MODEL_FACTS,),
            priority=Priority.high,
            inputs=inputs,
        )
    ]


UNIT = PhaseUnit(
    name="profile",
    runs_on_variants=True,
    specs=_specs,
    results=(PROFILE_CAPTURE,),
    config=ProfileSection,
    requires=("service",),
)
