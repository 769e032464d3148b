"""The names a decision rule's formulas may use, declared once: each figure the campaign measures
or derives (its unit is in its name), what it means, and which todo measures it. The rules file's
header documents the same names (a test checks the two agree), and the loader refuses a formula
that names anything else, so a misspelt name is exit 2 at `init`/`check`, not a silent "left to
investigate" after the campaign ran."""

from __future__ import annotations

from tasks.allreduce.results import ALLREDUCE_BENCH
from tasks.analysis.results import ANALYSIS_BREAKDOWN
from tasks.decisions.drafter_settings import SETTINGS
from tasks.gemm.results import GEMM_BENCH
from tasks.host.results import HOST_FACTS
from tasks.macro.results import MACRO_SINGLE, MACRO_SWEEP
from tasks.model.results import MODEL_FACTS

MODEL, HOST, SINGLE, SWEEP = MODEL_FACTS.id, HOST_FACTS.id, MACRO_SINGLE.id, MACRO_SWEEP.id
GEMM, ALLREDUCE, TRACE = GEMM_BENCH.id, ALLREDUCE_BENCH.id, ANALYSIS_BREAKDOWN.id

FIGURES: dict[str, tuple[str, str]] = {
    # name: (meaning, the todo that measures it)
    "tp": ("tensor-parallel size", MODEL),
    "cuda": ("1 on an NVIDIA GPU host, 0 elsewhere", HOST),
    "quantized": ("1 when the model's weights are not bf16", MODEL),
    "tpot_ms": ("TPOT at the capture's concurrency without the profiler (else with it)", SWEEP),
    "tpot_spread_pct": ("TPOT's spread over the repeats at that level, % of the median", SWEEP),
    "tpot_growth_ms": ("the level's TPOT minus the capture's (0 at the capture's level)", SWEEP),
    "decode_tpot_ms": ("single-stream TPOT", SINGLE),
    "w4a16_vs_bf16_speedup": ("median over M=1 dense shapes of bf16 / W4A16 time", GEMM),
    "comm_ms": ("communication ms a decode step, rank 0", TRACE),
    "gemm_ms": ("dense GEMM ms a decode step, rank 0", TRACE),
    "attention_ms": ("attention ms a decode step, rank 0", TRACE),
    "moe_ms": ("MoE expert ms a decode step, rank 0", TRACE),
    "comm_share_pct": ("communication % of a decode step", TRACE),
    "gemm_share_pct": ("GEMM % of a decode step", TRACE),
    "attention_share_pct": ("attention % of a decode step", TRACE),
    "moe_share_pct": ("MoE % of a decode step", TRACE),
    "comm_typical_ms": ("collective calls a step x their p50", TRACE),
    "comm_wait_ms": ("comm_ms minus comm_typical_ms (waiting)", TRACE),
    "comm_wait_min_rank_ms": ("the least waiting of any rank", TRACE),
    "ar_calls": ("all-reduces a decode step", TRACE),
    "ar_trace_p50_us": ("a traced all-reduce's p50", TRACE),
    "ar_micro_us": ("the server's all-reduce at the step's message size", ALLREDUCE),
    "ar_best_us": ("the fastest measured all-reduce implementation at that size", ALLREDUCE),
    "ar_alternatives": ("all-reduce implementations measured besides the server's", ALLREDUCE),
    "a2a_estimate_us": ("all-to-all dispatch estimated as the all-reduce at the dispatched bytes", ALLREDUCE),
    "w4a16_gemm_delta_ms": ("dense GEMMs a step in the model's format minus as W4A16", GEMM),
    "moe_w4a16_saving_ms_micro": (
        "a step's routed experts in the model's format minus as W4A16 (Marlin-MoE), micro, at the step's tokens",
        GEMM,
    ),
    "moe_w4a16_saving_ms_dense": ("0: the model has no MoE layers, so no routed experts to quantise", MODEL),
    "moe_w4a16_saving_ms": ("moe_ms x (1 - moe_w4a16_time_ratio)", "(assumed)"),
    "half_tp_gemm_extra_ms_micro": (
        "a step's GEMMs (dense and experts) as a rank at TP/2 runs them (on CPU with its cores) minus today's,"
        " at the step's tokens",
        GEMM,
    ),
    "half_tp_gemm_extra_ms": ("(gemm_ms + moe_ms) x (half_tp_gemm_factor - 1)", "(assumed)"),
    "half_tp_host_saving_ms_trace": (
        "at TP 2: TPOT less the traced step wall, at least 0 (a step's time outside the rank: scheduling and"
        " the broadcast to the worker processes, which the single-process executor at TP 1 does without)",
        TRACE,
    ),
    "spec_verify_extra_ms": (
        "a step's GEMMs (dense, and routed experts on a MoE model) at M x (spec_tokens + 1) minus at M",
        GEMM,
    ),
    "weight_floor_ms": ("weight bytes a step / the measured copy bandwidth", GEMM),
    "moe_layers": ("MoE layers of the model", MODEL),
    "layers": ("layers of the model", MODEL),
    "kv_read_ms": ("KV-cache bytes a decode step reads / the copy bandwidth", GEMM),
    "step_wall_ms": ("a decode step's wall time in the trace", TRACE),
    "device_ms": ("a decode step's device work", TRACE),
    "idle_ms": ("a decode step's device idle time between its kernels (CUDA-graph node gaps, memsets)", TRACE),
    "fits_half_tp": ("1 when the weights at TP/2 fit a GPU's usable memory", HOST),
    "spec_expected_tokens": ("(1 - a^(k+1)) / (1 - a), a = spec_accept_rate, k = spec_tokens", "(assumed)"),
    "kv_fp8_layer_delta_us_micro": (
        "one attention layer's decode work (cache write, paged attention; profiled with the L2 evicted ahead"
        " of each layer where the micro ran that pass) with the FP8 KV cache minus with the model's, at the"
        " step's sequences and mean context; with the cold pass, the model's side the server's own kernels"
        " (the base trace's p50 at the capture's level, carried to other levels by the micro's own)",
        f"{GEMM}, the model's dtype from {TRACE} where its trace holds the layer's kernels",
    ),
    "kv_fp8_layer_delta_us": (
        "kv_fp8_overhead_us_per_layer - kv_read_ms x (1 - kv_fp8_bytes_ratio) x 1000 / layers",
        "(assumed)",
    ),
    "spec_gpu_drafter_ms_micro": (
        "vLLM's GPU n-gram drafter a step (its suffix search, launches included) over the single-stream"
        " requests' recorded contexts, at the level's sequences: the part of the speculative step's extra"
        " timed before the experiment (the rejection sampler and the host's input preparation are not)",
        GEMM,
    ),
    "spec_replay_tokens_per_step": (
        "tokens a speculative decode step yields, the n-gram drafter (spec_tokens, prompt_lookup_min/max)"
        " replayed over the single-stream requests' own outputs",
        SINGLE,
    ),
}
"""Every figure `rule_figures` gives (besides the rules file's own [assumptions])."""

DERIVED_FROM_ASSUMPTIONS = {
    "spec_expected_tokens": ("spec_accept_rate", "spec_tokens"),
    "kv_fp8_layer_delta_us": ("kv_fp8_overhead_us_per_layer", "kv_fp8_bytes_ratio"),
    "moe_w4a16_saving_ms": ("moe_w4a16_time_ratio",),
    "half_tp_gemm_extra_ms": ("half_tp_gemm_factor",),
}
"""Figures the rules compute from stated assumptions: assumed too, until measured."""

VARIANT_ONLY = {
    "x_spec_mean_acceptance_length": "the variant's mean accepted tokens a speculative step (vLLM's counters)",
    "x_spec_drafts": "the variant's speculative drafts",
    "x_spec_tokens_per_step": "the variant's tokens a decode step: decode tokens / the streamed chunks they"
    " came in (one a step), or from vLLM's counters, decode tokens / (decode tokens - accepted), where fewer",
}
"""Names only an experiment's variant has; every figure above also exists as x_<name> after one."""

MEASURED_IN_PLACE: dict[str, tuple[str, ...]] = {
    "moe_w4a16_saving_ms": ("moe_w4a16_saving_ms_micro", "moe_w4a16_saving_ms_dense"),
    "half_tp_gemm_extra_ms": ("half_tp_gemm_extra_ms_micro",),
    "half_tp_host_saving_ms": ("half_tp_host_saving_ms_trace",),
    "spec_expected_tokens": ("spec_replay_tokens_per_step",),
    "kv_fp8_layer_delta_us": ("kv_fp8_layer_delta_us_micro",),
    "spec_gpu_step_extra_ms": ("spec_gpu_drafter_ms_micro",),
}
"""Assumptions the campaign measures where it can: the first of the measurements that has a value
stands in the formula in the assumption's place, and the findings say so; the assumption is used
only where none is measured."""


SETTING = "setting: the drafter's, which its experiment applies"
"""The provenance of a drafter setting (drafter_settings.SETTINGS): chosen, not assumed."""


def measured_by(name: str, figures: dict[str, float | None]) -> str | None:
    """The measurement standing in for the assumption ``name`` (None: not measured here)."""
    return next((figure for figure in MEASURED_IN_PLACE.get(name, ()) if figures.get(figure) is not None), None)


FUNCTIONS = frozenset({"min", "max", "abs"})


def provenance(
    name: str, figures: dict[str, float | None], assumptions: dict[str, float], earlier: dict[str, str] | None = None
) -> str:
    """Where a formula input came from: measured by this campaign (by which todo), by an earlier
    campaign (its ledger record), a drafter setting its experiment applies, or assumed (the rules
    file)."""
    measurement = measured_by(name, figures)
    if measurement is not None:
        assumed = assumptions.get(name)
        instead = (
            f"the assumed {assumed:g}" if assumed is not None and name not in (earlier or {}) else "the assumption"
        )
        return f"measured: {FIGURES[measurement][1]}, in place of {instead}"
    if earlier and name in earlier:
        return f"earlier record: {earlier[name]} (same hardware, shape and vLLM)"
    if name in SETTINGS and name in assumptions:
        return SETTING
    if name in assumptions:
        return "assumed"
    if name in DERIVED_FROM_ASSUMPTIONS:
        sources = DERIVED_FROM_ASSUMPTIONS[name]
        carried = [source for source in sources if earlier and source in earlier]
        if carried and len(carried) == len(sources):
            return "earlier record: from " + " and ".join(f"{s} ({earlier[s]})" for s in carried)  # type: ignore[index]
        return "assumed: from " + " and ".join(
            f"{s} (earlier record: {earlier[s]})" if s in carried else s  # type: ignore[index]
            for s in sources
        )
    if name in FIGURES:
        return "measured: " + FIGURES[name][1]
    return "measured by the experiment" if name.startswith("x_") else "unknown"


def variant_names() -> frozenset[str]:
    return frozenset(f"x_{name}" for name in FIGURES) | frozenset(VARIANT_ONLY)
