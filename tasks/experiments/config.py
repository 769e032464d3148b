"""What an experiment is: a decision option applied to the server, and how it is served.

`[[experiments]]` in campaign.toml lists them by option id (checked against the decision rules);
`experiments = "auto"` (or `[campaign] auto_experiments = true` beside a list) adds the options
the decision record calls for, each with its rule's default `apply`. An experiment's variant
server is the campaign's with the change applied: extra vLLM args, environment, another model
folder (a quantized checkpoint) or another tensor-parallel size. A `grid` makes one experiment
a point of every combination of its parameters (tasks/experiments/grid.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field

from tasks.decisions.apply import AppliedChange
from tasks.models import Section

GRID_OPTION = "grid"
"""The option a grid point stands for: a server-parameter sweep, not a decision option."""


class ExperimentConfig(Section):
    option: str = Field(
        GRID_OPTION,
        description=("the decision option it applies: an [[option]] id of the decision rules (a grid needs none)"),
    )
    grid: dict[str, list[int | float | str]] | None = Field(
        None,
        description=(
            "a server-parameter sweep, like `vllm bench sweep serve`: one variant server (one load) for every"
            " combination; keys: tensor_parallel, num_speculative_tokens (n-gram; 0: none), or any vLLM flag by"
            " its name (max_num_seqs: --max-num-seqs); each point is served as the campaign is, without a"
            " capture unless capture is set"
        ),
    )
    name: str | None = Field(
        None, pattern=r"^[a-z0-9_]{1,40}$", description=("names its todos (exp_<name>_...); default: the option id")
    )
    extra_args: list[str] | None = Field(
        None, description=("vLLM arguments added to the campaign's (JSON passes as it is); default: the rule's apply")
    )
    env: dict[str, str] | None = Field(None, description="environment added to service.env; default: the rule's")
    model: str | None = Field(None, description="another model folder on the host (a quantized checkpoint)")
    tensor_parallel: int | None = Field(None, ge=1, le=64, description="another TP size; default: the rule's")
    capture: bool = Field(
        True,
        description="capture and analyse the variant's decode steps too (the"
        " measured inputs of the formulas: attention, GEMM, communication a step)",
    )
    serving: Literal["all", "single"] = Field(
        "all",
        description=(
            "all: the campaign's levels (single stream and the sweep), same repeats and prompts; single:"
            " single stream only (enough where the capture, and so the prediction, is at c=1)"
        ),
    )


EXPERIMENTS_FIELD: Any = (
    list[ExperimentConfig] | Literal["auto"],
    Field(
        default_factory=list,
        description=(
            "follow-up experiments: 'auto' for the options the decision record calls for,"
            " or a list of [[experiments]] tables"
        ),
    ),
)


Change = AppliedChange
"""The server change an experiment applies (resolved from its config and the rule's apply)."""


@dataclass(frozen=True)
class Experiment:
    name: str
    option: str
    change: Change
    capture: bool = True
    serving: str = "all"
    auto: bool = False
    """Chosen by the decision record (experiments = 'auto'), not listed by the user."""
    notes: tuple[str, ...] = field(default=())
    grid: str | None = None
    """The grid this point belongs to (its [[experiments]] name), None for a decision option."""
    point: tuple[tuple[str, int | float | str], ...] = ()
    """The grid point's parameters, in the grid's order."""
