"""The engine's needs the server gives: ``service`` (the campaign's server answers), each
experiment's ``service@<name>`` (its variant's server answers) and ``accelerators_free`` (no
server of ours holds the GPUs or cores). They conflict with each other, and the runner groups
tasks by need, so each server loads once."""

from __future__ import annotations

from orchestrator.campaign import TaskContext
from tasks.host.results import HOST_FACTS
from tasks.service.lifecycle import ServiceLifecycle
from tasks.service.results import ACCELERATORS_FREE, SERVICE, AcceleratorsFree, ServiceFacts


class ServiceNeed:
    name = SERVICE
    conflicts = frozenset({ACCELERATORS_FREE})
    reads = (HOST_FACTS,)  # the launch plan is the host's (its GPUs, its cores)

    def __init__(self, lifecycle: ServiceLifecycle) -> None:
        self.lifecycle = lifecycle

    def ensure(self, ctx: TaskContext) -> ServiceFacts:
        return ServiceFacts.model_validate(self.lifecycle.ensure_running(ctx))

    def finish(self) -> None:
        # The campaign is over: stop a server we launched; leave one we adopted alone.
        if any(pid is not None for _, pid in self.lifecycle.node_pids()):
            self.lifecycle.ensure_stopped()

    def left_running(self) -> str | None:
        """What a campaign that stops on a failure leaves up (for `resume`, to spare a reload)."""
        pids = [pid for _, pid in self.lifecycle.node_pids() if pid is not None]
        return f"the server ({self.name}, pid {', '.join(map(str, pids))})" if pids else None


class AcceleratorsFreeNeed:
    name = ACCELERATORS_FREE
    conflicts = frozenset({SERVICE})
    reads = ()

    def __init__(self, lifecycle: ServiceLifecycle) -> None:
        self.lifecycle = lifecycle

    def ensure(self, ctx: TaskContext) -> AcceleratorsFree:
        return AcceleratorsFree.model_validate(self.lifecycle.ensure_stopped(ctx))

    def finish(self) -> None:
        return None


class VariantServiceNeed(ServiceNeed):
    """An experiment's server: the campaign's with one option applied (its own lifecycle, the
    same port and pid file, so ensuring it stops whichever other server of ours runs)."""

    def __init__(self, name: str, lifecycle: ServiceLifecycle, conflicts: frozenset[str]) -> None:
        super().__init__(lifecycle)
        self.name = name
        self.conflicts = conflicts
