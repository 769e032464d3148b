"""Phases after the service is up: benchmarks, microbenchmarks, capture, analysis."""

from __future__ import annotations

from orchestrator.campaign import TaskSpec
from orchestrator.schema import Priority
from tasks.session import Session


def extra_phase_specs(session: Session, phases: list[str]) -> list[TaskSpec]:
    specs: list[TaskSpec] = []
    if "macro" in phases:
        from tasks.macro import macro_single_action, macro_sweep_action

        specs += [
            TaskSpec("macro_single", "Measure single-stream TPOT (sequential requests after warmup)",
                     "macro", macro_single_action(session), depends_on=("service_ready",),
                     needs=("service",), priority=Priority.high),
            TaskSpec("macro_sweep", "Sweep concurrency: throughput and TTFT/TPOT/ITL/E2E percentiles",
                     "macro", macro_sweep_action(session), depends_on=("macro_single",),
                     needs=("service",), priority=Priority.high),
        ]
    return specs
