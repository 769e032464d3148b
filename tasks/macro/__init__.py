"""The `macro` unit: what users feel. Single-stream TPOT, then a concurrency sweep, measured by
a load client on the host beside the server and cross-checked against vLLM's own /metrics."""

from __future__ import annotations

from orchestrator.campaign import TaskSpec
from orchestrator.schema import Priority
from tasks.macro.config import MacroSection
from tasks.macro.results import (
    MACRO_CONVERSATIONS,
    MACRO_RATES,
    MACRO_REPLAY,
    MACRO_SINGLE,
    MACRO_SLO_SEARCH,
    MACRO_SWEEP,
)
from tasks.model.results import MODEL_FACTS
from tasks.service.results import SERVICE, SERVICE_READY
from tasks.session import Session
from tasks.unit import PhaseUnit


def _specs(session: Session, enabled: frozenset[str]) -> list[TaskSpec]:
    from tasks.macro.action import rate_sweep, single_stream, sweep
    from tasks.macro.conversations import conversations_action
    from tasks.macro.replay import replay_action, trace_digest
    from tasks.macro.slo_search import slo_search

    cfg = session.config.macro  # which fields each todo's result depends on: marked in tasks/macro/config.py

    def serving(ref, content: str, action, after, inputs: dict) -> TaskSpec:
        """A serving todo: on the campaign's server, after ``after``; its load client reads the
        model facts (the prompt vocabulary), which the server's readiness already waited for."""
        return TaskSpec(
            ref,
            content,
            "macro",
            action,
            depends_on=(after,),
            needs=(SERVICE,),
            optional=(MODEL_FACTS,),
            priority=Priority.high,
            inputs={"macro": inputs},
        )

    specs = [
        serving(
            MACRO_SINGLE,
            "Measure single-stream TPOT (sequential requests after warmup)",
            single_stream(session),
            SERVICE_READY,
            cfg.inputs_for(MACRO_SINGLE.id),
        ),
        serving(
            MACRO_SWEEP,
            "Sweep concurrency: throughput and TTFT/TPOT/ITL/E2E percentiles",
            sweep(session),
            MACRO_SINGLE,
            cfg.inputs_for(MACRO_SWEEP.id),
        ),
    ]
    if cfg.request_rates:
        specs.append(
            serving(
                MACRO_RATES,
                "Open-loop request rates (Poisson/bursty arrivals): latency and goodput",
                rate_sweep(session),
                MACRO_SWEEP,
                cfg.inputs_for(MACRO_RATES.id),
            )
        )
    if cfg.trace:
        specs.append(
            serving(
                MACRO_REPLAY,
                "Replay the trace's arrivals at their own pace: achieved rate, lateness, latency",
                replay_action(session),
                MACRO_SWEEP,
                cfg.inputs_for(MACRO_REPLAY.id) | {"trace_sha256": trace_digest(cfg.trace)},
            )
        )
    if cfg.conversations:
        specs.append(
            serving(
                MACRO_CONVERSATIONS,
                "Multi-turn conversations: TTFT and TPOT by turn, the prefix cache's share of each turn's prompt",
                conversations_action(session),
                MACRO_SWEEP,
                cfg.inputs_for(MACRO_CONVERSATIONS.id),
            )
        )
    if cfg.slo_search:
        specs.append(
            serving(
                MACRO_SLO_SEARCH,
                "Search the highest request rate that meets the SLOs (goodput)",
                slo_search(session),
                MACRO_SWEEP,
                cfg.inputs_for(MACRO_SLO_SEARCH.id),
            )
        )
    return specs


def _checks(session: Session) -> list:
    from tasks.macro.checks import macro_checks

    return macro_checks(session)


def _section(findings) -> str:  # tasks.view.Findings
    from tasks.macro.section import macro_section

    return macro_section(findings)


UNIT = PhaseUnit(
    runs_on_variants=True,
    name="macro",
    specs=_specs,
    results=(MACRO_SINGLE, MACRO_SWEEP, MACRO_RATES, MACRO_SLO_SEARCH, MACRO_REPLAY, MACRO_CONVERSATIONS),
    config=MacroSection,
    requires=("service",),
    section=_section,
    checks=_checks,
)
