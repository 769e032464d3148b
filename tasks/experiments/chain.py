"""An experiment's chain of todos: the campaign's own phases re-run on a variant server.

The chain is the service, macro (and, with `capture`, profile and analysis) units' task specs
built on the experiment's session, each id prefixed `exp_<name>_`, run in order (each link
depends on the one before; the first on the decision record), all needing the variant's own
server (`service@<name>`), so the variant loads once and is stopped before the next one starts.
Each link is isolated: a variant that fails (its server does not start) fails its own chain,
the other experiments go on and the campaign's findings are written.
A link reads the chain's results first (its scope) and the campaign's otherwise (host facts,
model facts where the model is the same, the GEMM and all-reduce micros).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from orchestrator.campaign import TaskSpec
from orchestrator.errors import InputError
from orchestrator.refs import NeedRef, TaskRef
from tasks.analysis.results import ANALYSIS_BREAKDOWN
from tasks.experiments.config import Change, Experiment
from tasks.experiments.results import DECISION_RECORD
from tasks.macro.results import MACRO_SINGLE, MACRO_SWEEP
from tasks.model.results import MODEL_FACTS
from tasks.profile.results import PROFILE_CAPTURE
from tasks.service.results import SERVICE, SERVICE_READY
from tasks.session import Session

SHADOWED: tuple[TaskRef[Any], ...] = (
    MODEL_FACTS,
    SERVICE_READY,
    MACRO_SINGLE,
    MACRO_SWEEP,
    PROFILE_CAPTURE,
    ANALYSIS_BREAKDOWN,
)
"""The campaign's tasks an experiment measures again on its variant (where it runs them)."""
SHADOWED_IDS = frozenset(ref.id for ref in SHADOWED)


def scope(experiment: Experiment) -> str:
    return f"exp_{experiment.name}_"


def need_name(experiment: Experiment) -> NeedRef:
    """The experiment's own server: a variant of the campaign's."""
    return SERVICE.variant(experiment.name)


def variant_config(config: Any, change: Change) -> Any:
    """The campaign's config with the experiment's server change applied."""
    service = config.service
    update: dict[str, Any] = {
        "extra_args": [*service.extra_args, *change.extra_args],
        "env": service.env | dict(change.env),
    }
    if change.model:
        update["model"] = change.model
    if change.tensor_parallel:
        update["tensor_parallel"] = change.tensor_parallel
    return config.model_copy(update={"service": service.model_copy(update=update)})


def variant_session(session: Session, experiment: Experiment) -> Session:
    return session.variant(experiment.name, variant_config(session.config, experiment.change))


def chain_ids(experiment: Experiment) -> dict[str, str]:
    """Campaign task id -> this experiment's id for it (only the ones its chain runs)."""
    return {spec_id: scope(experiment) + spec_id for spec_id in _links(experiment)}


def _links(experiment: Experiment) -> list[str]:
    refs = [MODEL_FACTS] if experiment.change.model or experiment.change.tensor_parallel else []
    refs += [SERVICE_READY, MACRO_SINGLE] + ([MACRO_SWEEP] if experiment.serving == "all" else [])
    refs += [PROFILE_CAPTURE, ANALYSIS_BREAKDOWN] if experiment.capture else []
    return [ref.id for ref in refs]


def chain_specs(session: Session, experiment: Experiment, units: dict[str, Any]) -> list[TaskSpec]:
    """The experiment's todos, in order, from the campaign's units run on its variant session."""
    variant = variant_session(session, experiment)
    wanted = _links(experiment)
    built: dict[str, TaskSpec] = {}
    for unit in units.values():
        if not unit.runs_on_variants:
            continue
        for spec in unit.specs(variant, variant.enabled | {unit.name}):
            if spec.id in wanted:
                built[spec.id] = spec
    missing = [spec_id for spec_id in wanted if spec_id not in built]
    if missing:
        raise InputError(
            f"experiment '{experiment.name}': the campaign has no {', '.join(missing)} to re-run on"
            " the variant; enable its phase in campaign.phases or set capture = false"
        )
    prefix, need = scope(experiment), need_name(experiment)
    chain, previous = [], DECISION_RECORD.id
    for spec_id in wanted:
        spec = built[spec_id]
        # The shadowed tasks it waited for are its chain's links now; the campaign's model facts
        # stay where the variant keeps the model.
        kept = [
            dep
            for dep in spec.depends_on
            if dep not in SHADOWED_IDS or dep == MODEL_FACTS.id and MODEL_FACTS.id not in wanted
        ]
        chain.append(
            dataclasses.replace(
                spec,
                ref=spec.ref.scoped(prefix),
                scope=prefix,
                isolated=True,
                content=f"Experiment {experiment.name} ({experiment.option}): {spec.content[0].lower()}{spec.content[1:]}",
                depends_on=tuple(dict.fromkeys([previous, *kept])),
                needs=tuple(need if n == SERVICE else n for n in spec.needs),
                inputs=spec.inputs
                | {"experiment": {"option": experiment.option, "change": experiment.change.describe()}},
            )
        )
        previous = prefix + spec_id
    return chain
