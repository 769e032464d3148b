"""The `service` unit: the vLLM server, launched (or adopted) once and followed while it loads.

It gives the engine two needs, ``service`` (the server answers with our model) and
``accelerators_free`` (no server of ours holds the GPUs or cores); they conflict, and the
runner groups tasks by need, so a campaign loads the model once. Its one task records the
readiness figures the `service` need gathered.
"""

from __future__ import annotations

import time
from typing import Any

from orchestrator.campaign import Need, TaskContext, TaskSpec
from orchestrator.schema import Priority
from tasks.host.results import HOST_FACTS
from tasks.model.results import MODEL_FACTS
from tasks.redaction import redacted_env
from tasks.service.config import ServiceSection
from tasks.service.results import ACCELERATORS_FREE, SERVICE, SERVICE_READY, ServiceFacts, ServiceReady
from tasks.session import Session
from tasks.unit import PhaseUnit


def service_identity(config: Any) -> dict[str, Any]:
    """The service settings that change what the server computes (not its port or deadlines);
    environment values as digests, so a token is never written into the todo file."""
    identity = config.service.inputs_for(SERVICE_READY.id)
    return identity | {"env": redacted_env(config.service.env)}


def _ready(ctx: TaskContext) -> ServiceReady:
    facts = ctx.need_facts(SERVICE, ServiceFacts)
    ready = ServiceReady.model_validate(facts.model_dump(exclude={"health_seen_monotonic"}))
    if facts.health_seen_monotonic is not None:
        ready.health_to_task_done_s = round(time.monotonic() - facts.health_seen_monotonic, 3)
    return ready


def _specs(session: Session, enabled: frozenset[str]) -> list[TaskSpec]:
    from tasks.host import host_identity

    return [
        TaskSpec(
            SERVICE_READY,
            "Check the vLLM service is running and ready",
            "service",
            _ready,
            depends_on=(HOST_FACTS, MODEL_FACTS),
            needs=(SERVICE,),
            priority=Priority.high,
            inputs={"host": host_identity(session.config), "service": service_identity(session.config)},
        )
    ]


def _needs(session: Session) -> dict[str, Need]:
    from tasks.service.lifecycle import ServiceLifecycle
    from tasks.service.needs import AcceleratorsFreeNeed, ServiceNeed

    lifecycle = ServiceLifecycle(session)
    return {SERVICE: ServiceNeed(lifecycle), ACCELERATORS_FREE: AcceleratorsFreeNeed(lifecycle)}


def _checks(session: Session) -> list:
    from tasks.service.checks import service_checks

    return service_checks(session)


def _stop(session: Session) -> list[str]:
    """The server this campaign launched (its pid file on the host): its whole process group, then
    the census of accelerators_free. A server we did not launch is left alone."""
    from tasks.service.lifecycle import ServiceLifecycle

    lifecycle = ServiceLifecycle(session)
    running = [(node, pid) for node, pid in lifecycle.node_pids() if pid is not None]
    if not running:
        return [f"no server of this campaign runs on {', '.join(node.name for node in session.nodes)}"]
    lifecycle.ensure_stopped()  # raises unless the census passes: port closed, no pid, GPUs free
    return [
        f"stopped the server's process group {pid} on {node.name}"
        + (f": port {session.config.service.port} closed" if node.index == 0 else "")
        + ", no process of it left, no GPU process or memory held"
        for node, pid in running
    ]


UNIT = PhaseUnit(
    runs_on_variants=True,
    name="service",
    specs=_specs,
    results=(SERVICE_READY,),
    config=ServiceSection,
    requires=("host", "model"),
    needs=_needs,
    checks=_checks,
    stop=_stop,
)
