"""The `macro` unit: what users feel. Single-stream TPOT, then a concurrency sweep, measured by
a load client on the host beside the server and cross-checked against vLLM's own /metrics."""

from __future__ import annotations

from orchestrator.campaign import TaskSpec
from orchestrator.schema import Priority
from tasks.macro.config import MacroSection
from tasks.macro.results import MACRO_RATES, MACRO_SINGLE, MACRO_SLO_SEARCH, MACRO_SWEEP
from tasks.model.results import MODEL_FACTS
from tasks.service.results import SERVICE_READY
from tasks.session import Session
from tasks.unit import PhaseUnit


def _specs(session: Session, enabled: frozenset[str]) -> list[TaskSpec]:
    from tasks.macro.action import rate_sweep, single_stream, sweep
    from tasks.macro.slo_search import slo_search

    # The failure and outlier thresholds judge results; they change no measurement, so they are not inputs.
    # SLOs judge the stored per-request latencies when the findings are written: not inputs.
    macro = session.config.macro.model_dump(
        exclude={
            "max_failed_pct",
            "outlier_pct",
            "slo_ttft_ms",
            "slo_tpot_ms",
            "slo_e2e_ms",
            "request_rates",
            "burstiness",
            "rate_max_concurrency",
            "slo_search",
            "slo_met_pct",
            "slo_search_runs",
            "slo_search_start_rate",
            "percentiles",
        }
    )
    return (
        [
            TaskSpec(
                MACRO_SINGLE,
                "Measure single-stream TPOT (sequential requests after warmup)",
                "macro",
                single_stream(session),
                depends_on=(SERVICE_READY,),
                needs=("service",),
                optional=(MODEL_FACTS,),
                priority=Priority.high,
                inputs={
                    "macro": {k: v for k, v in macro.items() if k != "concurrency_max" and k != "requests_per_level"}
                },
            ),
            TaskSpec(
                MACRO_SWEEP,
                "Sweep concurrency: throughput and TTFT/TPOT/ITL/E2E percentiles",
                "macro",
                sweep(session),
                depends_on=(MACRO_SINGLE,),
                needs=("service",),
                optional=(MODEL_FACTS,),
                priority=Priority.high,
                inputs={"macro": macro},
            ),
        ]
        + (
            [
                TaskSpec(
                    MACRO_RATES,
                    "Open-loop request rates (Poisson/bursty arrivals): latency and goodput",
                    "macro",
                    rate_sweep(session),
                    depends_on=(MACRO_SWEEP,),
                    needs=("service",),
                    optional=(MODEL_FACTS,),
                    priority=Priority.high,
                    inputs={
                        "macro": {
                            **macro,
                            **session.config.macro.model_dump(
                                include={"request_rates", "burstiness", "rate_max_concurrency"}
                            ),
                        }
                    },
                )
            ]
            if session.config.macro.request_rates
            else []
        )
        + (
            [
                TaskSpec(
                    MACRO_SLO_SEARCH,
                    "Search the highest request rate that meets the SLOs (goodput)",
                    "macro",
                    slo_search(session),
                    depends_on=(MACRO_SWEEP,),
                    needs=("service",),
                    optional=(MODEL_FACTS,),
                    priority=Priority.high,
                    inputs={
                        "macro": {
                            **macro,
                            **session.config.macro.model_dump(
                                include={
                                    "burstiness",
                                    "rate_max_concurrency",
                                    "slo_ttft_ms",
                                    "slo_tpot_ms",
                                    "slo_e2e_ms",
                                    "slo_met_pct",
                                    "slo_search_runs",
                                    "slo_search_start_rate",
                                }
                            ),
                        }
                    },
                )
            ]
            if session.config.macro.slo_search
            else []
        )
    )


def _section(findings) -> str:  # noqa: ANN001 - tasks.findings.Findings
    from tasks.macro.section import macro_section

    return macro_section(findings)


UNIT = PhaseUnit(
    name="macro",
    specs=_specs,
    results=(MACRO_SINGLE, MACRO_SWEEP, MACRO_RATES, MACRO_SLO_SEARCH),
    config=MacroSection,
    requires=("service",),
    section=_section,
)
