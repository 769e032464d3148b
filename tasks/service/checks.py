"""The service's part of `orchestrate check`: the port (free, or held by our server to adopt),
the accelerators (GPUs visible, enough of them for the tensor-parallel size, nothing else holding
their memory), and the exact command the server will be started with."""

from __future__ import annotations

from orchestrator.campaign import Check
from orchestrator.statefile import load_state
from tasks.host.results import HOST_FACTS
from tasks.session import Session


def service_checks(session: Session) -> list[Check]:
    from tasks.host.results import HostFacts
    from tasks.service.census import busy_gpus
    from tasks.service.launch import launch_plan, served_name
    from tasks.service.lifecycle import ServiceLifecycle

    cfg = session.config
    host = session.host()
    lifecycle = ServiceLifecycle(session)
    checks = []
    port = cfg.service.port
    taken = host.port_open(port)
    served = lifecycle.serving_model() if taken else None
    ours = lifecycle.our_pid()
    if not taken:
        checks.append(Check("service.port", f"{port} free on {host.name}"))
    elif ours is not None:
        checks.append(Check("service.port", f"{port} held by the server this campaign launched (pid {ours})"))
    elif served == served_name(session):
        checks.append(Check("service.port", f"{port}: a server of this model answers there; it will be adopted"))
    else:
        checks.append(
            Check(
                "service.port",
                f"{port} is taken on {host.name} by "
                + (f"a server of another model ({served})" if served else "something that is not vLLM")
                + ": choose a free service.port or stop what holds it",
                blocking=True,
            )
        )
    gpus = host.run(
        "command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=index,memory.used,memory.total"
        " --format=csv,noheader,nounits",
        check=False,
        timeout_s=60,
    )
    listed = [line for line in gpus.stdout.splitlines() if line.strip()] if gpus.exit_code == 0 else []
    if cfg.host.accelerator == "cuda" and not listed:
        checks.append(
            Check("host.accelerator", f"cuda asked, but nvidia-smi lists no GPU on {host.name}", blocking=True)
        )
    elif listed:
        busy = [] if ours is not None or served else busy_gpus(gpus.stdout)
        checks.append(
            Check(
                "GPUs",
                f"{len(listed)} visible"
                + (
                    f"; memory in use with no server of ours: {', '.join(busy)}: stop what holds it (the"
                    " microbenchmarks need the accelerators free)"
                    if busy
                    else ", none holding memory"
                ),
                blocking=bool(busy),
            )
        )
        if cfg.service.tensor_parallel > len(listed):
            checks.append(
                Check(
                    "service.tensor_parallel",
                    f"{cfg.service.tensor_parallel} ranks, {len(listed)} GPUs"
                    " on the host: lower service.tensor_parallel",
                    blocking=True,
                )
            )
    state = load_state(session.state_path) if session.state_path.is_file() else None
    facts = state.by_id().get(HOST_FACTS.id) if state else None
    if facts is not None and facts.result:
        plan = launch_plan(session, HostFacts.model_validate(facts.result), session.nodes[0])
        checks.append(Check("server command", " ".join(plan.argv)[:400]))
    else:
        checks.append(Check("server command", "resolved after host_facts ran (`orchestrate resume`)"))
    return checks
