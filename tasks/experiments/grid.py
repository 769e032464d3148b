"""A server-parameter sweep: one `[[experiments]]` table with a `grid` becomes an experiment a
point, each a variant server loaded once and served at the campaign's levels (as `vllm bench
sweep serve` does). A key is a vLLM flag by its name (max_num_seqs -> --max-num-seqs), or one of
the two the server change holds itself: tensor_parallel, and num_speculative_tokens (n-gram
speculative decoding with that many draft tokens; 0 leaves it off)."""

from __future__ import annotations

import itertools
import json
from typing import Any

from orchestrator.errors import InputError
from tasks.experiments.config import GRID_OPTION, Change, Experiment, ExperimentConfig

MAX_POINTS = 64
NGRAM = {"method": "ngram", "prompt_lookup_max": 4, "prompt_lookup_min": 2}


def point_change(base: Change, point: dict[str, Any]) -> Change:
    """The grid point's server change on top of the table's own (extra_args, env, model)."""
    args = list(base.extra_args)
    tp = base.tensor_parallel
    for key, value in point.items():
        if key == "tensor_parallel":
            tp = int(value)
        elif key == "num_speculative_tokens":
            if int(value) > 0:
                args += ["--speculative-config", json.dumps(NGRAM | {"num_speculative_tokens": int(value)})]
        else:
            args += [f"--{key.replace('_', '-')}", str(value)]
    return Change(tuple(args), base.env, base.model, tp)


def expand(entry: ExperimentConfig, index: int, config_file: str = "campaign.toml") -> list[Experiment]:
    """Every combination of the grid's values, in order, each named <name>_<n>."""
    field = f"{config_file}: field 'experiments.{index}"
    grid = entry.grid or {}
    if not entry.name:
        raise InputError(f"{field}.name': a grid needs a name (its points are <name>_1, <name>_2, ...)")
    if entry.option != GRID_OPTION:
        raise InputError(
            f"{field}.option': a grid sweeps server parameters and applies no option;"
            " leave option out (or list the option as its own [[experiments]] table)"
        )
    for key, values in grid.items():
        if not values:
            raise InputError(f"{field}.grid.{key}': give at least one value")
        if key in ("tensor_parallel", "num_speculative_tokens") and not all(
            isinstance(v, int) and v >= (1 if key == "tensor_parallel" else 0) for v in values
        ):
            raise InputError(f"{field}.grid.{key}': whole numbers ({'>= 1' if key == 'tensor_parallel' else '>= 0'})")
        if not key.replace("_", "").isalnum():
            raise InputError(f"{field}.grid.{key}': a vLLM flag name (letters, digits, _), e.g. max_num_seqs")
    points = [dict(zip(grid, combination, strict=True)) for combination in itertools.product(*grid.values())]
    if not points or len(points) > MAX_POINTS:
        raise InputError(f"{field}.grid': {len(points)} points; give 1 to {MAX_POINTS} (each is a model load)")
    base = Change(
        tuple(entry.extra_args or ()), tuple(sorted((entry.env or {}).items())), entry.model, entry.tensor_parallel
    )
    capture = entry.capture if "capture" in entry.model_fields_set else False
    return [
        Experiment(
            f"{entry.name}_{n}",
            GRID_OPTION,
            point_change(base, point),
            capture,
            entry.serving,
            grid=entry.name,
            point=tuple(point.items()),
        )
        for n, point in enumerate(points, start=1)
    ]
