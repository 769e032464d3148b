"""GEMM kernels per layer type: a decode step's GEMM launches (rank 0's trace), folded over the
model's layers, each position's kernel(s) and traced µs beside the microbenchmark's µs for the
layer at that position. CUDA-graph replays record no shapes, so the layer a position belongs to
comes from the launch order: cuBLAS's split-K reduce kernels join the GEMM before them, and
positions are named only where their count a layer equals the model's per-layer GEMMs."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from orchestrator.report import md_table
from tasks.decisions.figures import KeyFigures
from tasks.decisions.gemm_prediction import micro_us, variant_of
from tasks.view import fmt

SPLIT_K_REDUCE = re.compile(r"splitKreduce|reduce_kernel|splitk_reduce", re.I)


@dataclass
class LayerPosition:
    label: str
    kernels: str
    traced_us: float
    micro_us: float | None
    micro_cold_us: float | None = None


def fold(figures: KeyFigures) -> tuple[list[LayerPosition], int] | None:
    """Positions a layer (and after the layers), with the number of layers folded; None when the
    trace has no GEMM sequence or fewer GEMMs a step than layers."""
    rank0 = figures.rank0
    shapes = figures.model.shapes if figures.model else None
    sequence = rank0.gemm_sequence if rank0 else None
    if not (sequence and shapes and shapes.num_layers) or shapes.family == "deepseek_v3":
        return None  # DeepSeek-V3's first layers are dense, the rest MoE: no one repeating layer
    logical: list[tuple[list[str], float]] = []  # one GEMM: its kernel names and µs
    for name_index, us in sequence.positions:
        name = sequence.names[name_index]
        if logical and SPLIT_K_REDUCE.search(name):
            logical[-1][0].append(name)
            logical[-1] = (logical[-1][0], logical[-1][1] + us)
        else:
            logical.append(([name], us))
    layers = shapes.num_layers
    per_layer = len(logical) // layers
    if not per_layer:
        return None
    dense = [
        layer
        for layer in shapes.layers
        if layer.kind == "dense" and layer.count_per_layer == 1.0 and layer.name != "lm_head"
    ]
    labels = (
        [layer.name for layer in dense]
        if len(dense) == per_layer
        else [f"GEMM #{j + 1} of a layer" for j in range(per_layer)]
    )
    micro, cold = _micro_us(figures), _micro_us(figures, cold=True)
    positions = []
    for j in range(per_layer):
        group = [logical[layer * per_layer + j] for layer in range(layers)]
        names = Counter(" + ".join(_short(n) for n in names) for names, _ in group).most_common(1)[0][0]
        positions.append(
            LayerPosition(
                labels[j], names, sum(us for _, us in group) / layers, micro.get(labels[j]), cold.get(labels[j])
            )
        )
    for names, us in logical[layers * per_layer :]:
        last = len(logical) - layers * per_layer == 1  # one GEMM after the layers: the lm_head
        positions.append(
            LayerPosition(
                "after the layers",
                " + ".join(_short(n) for n in names),
                us,
                micro.get("lm_head") if last else None,
                cold.get("lm_head") if last else None,
            )
        )
    return positions, layers


def _micro_us(figures: KeyFigures, cold: bool = False) -> dict[str, float]:
    rank0, gemm = figures.rank0, figures.gemm
    if not (rank0 and gemm):
        return {}
    timed = [row for row in gemm.rows if row.us is not None and not variant_of(row.name)]
    if not timed:
        return {}
    wanted = max(1, round(rank0.decode_tokens_per_step or 1))
    m = min({row.m for row in timed}, key=lambda value: (abs(value - wanted), value))
    if cold and not any(row.op_cold_us is not None for row in timed):
        return {}
    return {row.name: micro_us(row, cold) for row in timed if row.m == m}


def _short(name: str) -> str:
    return f"`{name[:60]}{'…' if len(name) > 60 else ''}`"


def per_layer_section(figures: KeyFigures) -> str:
    folded = fold(figures)
    if folded is None:
        return ""
    positions, layers = folded
    with_cold = any(p.micro_cold_us is not None for p in positions)
    rows = [
        [
            p.label,
            p.kernels,
            fmt(p.traced_us, 1),
            fmt(p.micro_us, 1),
            *([fmt(p.micro_cold_us, 1)] if with_cold else []),
            fmt(p.micro_us / p.traced_us) if p.micro_us and p.traced_us else "-",
        ]
        for p in positions
    ]
    return (
        "### GEMM kernels per layer type (rank 0, decode)\n\n"
        f"A decode step's GEMM launches in order, folded over the model's {layers} layers (µs: the"
        " mean over layers and steps; a split-K reduce joins its GEMM). Micro: the GEMM phase's"
        " figure for that layer at the step's batch.\n\n"
        + md_table(
            [
                "layer",
                "kernel(s) (trace)",
                "trace µs",
                "micro µs",
                *(["micro µs, caches flushed"] if with_cold else []),
                "micro/trace",
            ],
            rows,
        )
    )
