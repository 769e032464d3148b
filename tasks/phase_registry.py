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
    if "profile" in phases:
        from tasks.capture import capture_action

        after = "macro_sweep" if "macro" in phases else "service_ready"
        specs.append(TaskSpec("profile_capture", "Capture decode steps with torch.profiler through vLLM",
                              "profile", capture_action(session), depends_on=(after,),
                              needs=("service",), priority=Priority.high))
    if "analysis" in phases and "profile" in phases:
        from tasks.analysis import analysis_action

        specs.append(TaskSpec("trace_analysis", "Break decode time down by category from the traces",
                              "analysis", analysis_action(session), depends_on=("profile_capture",)))
    if "gemm" in phases:
        from tasks.micro import gemm_action

        specs.append(TaskSpec("gemm_bench", "Microbenchmark the decode GEMMs at the model's per-rank shapes",
                              "gemm", gemm_action(session), depends_on=("model_config",),
                              needs=("accelerators_free",)))
    if "allreduce" in phases:
        from tasks.micro import allreduce_action

        specs.append(TaskSpec("allreduce_bench", "Benchmark all-reduce across the TP ranks at decode sizes",
                              "allreduce", allreduce_action(session), depends_on=("model_config",),
                              needs=("accelerators_free",)))
    return specs
