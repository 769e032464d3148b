"""The `gemm` phase's part of the findings: every decode GEMM per rank against the copy ceiling."""

from __future__ import annotations

from orchestrator.report import md_table
from tasks.gemm.results import GEMM_BENCH, GemmResult, GemmRow, KvRow, kv_pair_us
from tasks.macro.noise import NOISY_PCT, STABLE_PCT
from tasks.model.results import MODEL_FACTS
from tasks.view import Findings, fmt


def gemm_section(findings: Findings) -> str:
    gemm = findings.result(GEMM_BENCH)
    if not gemm:
        return ""
    model = findings.result(MODEL_FACTS)
    shapes = model.shapes if model else None
    described = (
        f"TP={shapes.tensor_parallel}, family {shapes.family}, weights {shapes.weight_dtype}"
        if shapes
        else "shapes from config.json"
    )
    text = (
        "## Phase 2a: GEMM microbenchmarks at the model's per-rank sizes\n\n"
        f"GEMMs per rank ({described}) on {gemm.info.device_name} (torch {gemm.info.torch})."
        f" Bandwidth ceiling: a large device-to-device copy in the same run,"
        f" **{gemm.copy_ceiling_gbps:.1f} GB/s** (read + write). Each kernel was checked against a"
        f" bf16 reference first"
        + (
            f"; {gemm.info.threads} CPU threads, one server rank's share of the cores"
            if gemm.info.device == "cpu"
            else ""
        )
        + f". Source: {findings.link(gemm.artifact)}.\n\n"
    )
    if any(row.op_us is not None for row in gemm.rows):
        text += (
            'µs: a call from Python (perf_counter); "op": the GEMM op\'s own duration as a torch.profiler'
            " trace records it (p50), without the wrapper's allocation and reshape: the figure the"
            ' cross-checks hold against the server\'s trace; "cold": the same op with 64 MB written'
            " between calls, so its weights come from memory, not cache.\n\n"
        )
    half = [row for row in gemm.rows if row.name.endswith(" (at TP/2)")]
    if half:
        threads = f", on {half[0].threads} CPU threads (such a rank's share of the cores)" if half[0].threads else ""
        text += (
            "Rows `(at TP/2)` are the same GEMMs as a rank at half the tensor parallelism runs them (each"
            f" twice as wide){threads}: what `lower_tp` would do to the step's GEMM time, measured before"
            " anything is relaunched.\n\n"
        )
    if any(row.experts for row in gemm.rows):
        text += (
            "`experts_fused` is one MoE layer's routed experts as the server runs them (both GEMMs,"
            " the activation, token alignment and the weighted sum in vLLM's fused MoE), M tokens"
            " routed at random to top-k of E experts, K = hidden size, N = expert intermediate size"
            " per rank; GB/s counts the weights of the experts a call is expected to touch."
            " The `expert_w13`/`expert_w2` rows time one expert's GEMM alone.\n\n"
        )
    rows = []
    for row in gemm.rows:
        name = f"{row.name} (E={row.experts}, top-{row.top_k})" if row.experts else row.name
        if row.us is None:
            rows.append([name, row.m, row.k, row.n, row.dtype, "-", "-", "-", "-", "-", row.skipped or ""])
            continue
        error = row.relative_error_vs_bf16_reference
        us = fmt(row.us, 1) + (
            f" (op {fmt(row.op_us, 1)}, cold {fmt(row.op_cold_us, 1)})" if row.op_us is not None else ""
        )
        note = f"{error:.1e}" if error is not None else ""
        if row.remeasured_from_us is not None and not row.flag:
            note += f"; re-measured (first {row.remeasured_from_us:.1f} µs, out of line with the other M)"
        if row.flag:
            note += f"; **flagged: {row.flag}**"
        rows.append(
            [
                name,
                row.m,
                row.k,
                row.n,
                row.dtype,
                row.kernel or "",
                us,
                spread_cell(row),
                fmt(row.tflops, 3),
                fmt(row.gbps, 1),
                fmt(row.pct_of_copy_ceiling, 1),
                note,
            ]
        )
    return (
        text
        + md_table(
            [
                "layer",
                "M",
                "K",
                "N",
                "dtype",
                "kernel",
                "µs",
                "spread",
                "TFLOP/s",
                "GB/s",
                "% of copy",
                "rel. err / note",
            ],
            rows,
        )
        + noise_note(gemm)
        + kv_section(gemm)
        + drafter_line(gemm)
    )


def drafter_line(gemm: GemmResult) -> str:
    """The GPU n-gram drafter micro: one line, its time a step at each level, or why it has none (CUDA
    hosts only; elsewhere nothing, as the option it feeds does not apply)."""
    timed = [row for row in gemm.drafter_rows if row.us is not None]
    if not timed:
        why = next((row.skipped for row in gemm.drafter_rows if row.skipped), gemm.drafter_not_measured)
        return f"\n**GPU n-gram drafter micro**: not timed ({why}).\n" if why and gemm.info.device == "cuda" else ""
    points = ", ".join(f"{row.us:.1f} µs at {row.sequences} sequence(s)" for row in timed)
    return (
        f"\n**GPU n-gram drafter micro** (vLLM's ngram_gpu suffix search a step over the single stream's recorded"
        f" contexts, launches included: the part of `spec_gpu_step_extra_ms` timed before the experiment, the rejection"
        f" sampler and the host's input preparation left out): {points}.\n"
    )


def kv_section(gemm: GemmResult) -> str:
    """The FP8 KV-cache micro: one attention layer's decode work, the model's KV dtype against FP8."""
    if not gemm.kv_rows:
        return f"\n**FP8 KV-cache micro**: not run ({gemm.kv_not_measured}).\n" if gemm.kv_not_measured else ""
    pairs: dict[tuple[int, int], dict[str, KvRow]] = {}
    for row in gemm.kv_rows:
        pairs.setdefault((row.context, row.m), {})[row.kv_dtype] = row
    rows = []
    for (context, m), by_dtype in sorted(pairs.items()):
        auto, fp8 = by_dtype.get("auto"), by_dtype.get("fp8")
        auto_us, fp8_us = kv_pair_us(auto, fp8) if auto is not None and fp8 is not None else (None, None)
        if auto is None or fp8 is None or auto_us is None or fp8_us is None:
            why = next((r.skipped for r in (auto, fp8) if r and r.skipped), "not timed")
            rows.append([m, context, "-", "-", "-", "-", why])
            continue
        cold = auto.cold and fp8.cold

        def parts(row: KvRow, cold: bool = cold) -> str:
            write, attention = (row.cold_write_us, row.cold_attention_us) if cold else (row.write_us, row.attention_us)
            return f"{fmt(write, 2)} + {fmt(attention, 2)}"

        held = f"L2 held: {parts(auto, False)} against {parts(fp8, False)}" if cold else None
        quant = None if fp8.query_quant_us is None else f"query quantisation alone {fp8.query_quant_us:.2f}"
        rows.append(
            [
                m,
                context,
                f"{parts(auto)} = {fmt(auto_us, 2)}",
                f"{parts(fp8)} = {fmt(fp8_us, 2)}",
                f"{fp8_us - auto_us:+.2f}",
                f"{(fp8_us / auto_us - 1) * 100:+.1f}%",
                "; ".join(note for note in (auto.note, fp8.note, quant, held) if note),
            ]
        )
    first = gemm.kv_rows[0]
    timed = [row for row in gemm.kv_rows if row.skipped is None]
    mla = any("MLA" in (row.kernel or "") for row in timed)
    what = (
        "one MLA attention layer's decode work as the server runs each dtype, µs: the latent cache write"
        " (`concat_and_cache_mla`, quantising to FP8 on the way in) and decode attention on the backend vLLM"
        " takes for the dtype (the model's: FLASH_ATTN_MLA, FlashAttention-3 with the absorbed query; FP8:"
        " TRITON_MLA's split-KV stages, FLASH_ATTN_MLA having no FP8 KV cache) over every sequence's context"
        if mla
        else "one attention layer's decode work as the server runs it, µs: the cache write"
        " (`reshape_and_cache_flash`, quantising to FP8 on the way in) and FlashAttention-3's paged decode"
        " over every sequence's context"
    )
    return (
        "\n**FP8 KV-cache micro** (`fp8_kv_cache`'s input, before any experiment): "
        + what
        + f" (blocks of {first.block_size or 16} in random order, "
        + (
            "each layer's cache and scales its own copy; each kernel profiled with the L2 evicted ahead of"
            " every layer, as the rest of the step's weights evict it in the server; the rotation's own"
            " timings, with the L2 holding what fits, in the note)"
            if timed and all(row.cold for row in timed)
            else "each layer's cache its own copy)"
        )
        + ", with the KV cache in the model's dtype and in FP8 e4m3 (scales 1: dummy weights give"
        " no calibrated scale; the kernels' time does not depend on it)."
        + (
            " TRITON_MLA takes the query in bf16 (it dequantises the cache as it loads it).\n\n"
            if mla
            else " The query's FP8 quantisation, timed as a kernel of its own, is shown but not counted: the"
            " server's torch.compile fuses it into the kernel before attention (FP8 variants' traces run no"
            " kernel more than their base).\n\n"
        )
        + md_table(
            ["sequences", "context tokens", "model's KV µs", "FP8 KV µs", "FP8 - model's µs", "change", "note"],
            rows,
        )
    )


def spread_cell(row: GemmRow) -> str:
    """(max - min) / median of the timings behind ``us``, with the verdict the serving table uses."""
    if row.spread_pct is None:
        return "n/a"
    verdict = "stable" if row.spread_pct <= STABLE_PCT else "noisy" if row.spread_pct <= NOISY_PCT else "unstable"
    return f"{row.spread_pct:.0f}% of {row.samples} ({verdict})"


def noise_note(gemm: GemmResult) -> str:
    timed = [row for row in gemm.rows if row.spread_pct is not None]
    if not timed:
        return ""
    flagged = sum(1 for row in gemm.rows if row.flag)
    return (
        f"\nSpread: (max - min) / median of the {timed[0].samples} timings each `µs` is the median of; a"
        " time out of line with the same GEMM at the neighbouring M (falling over 3x as M grows, or"
        " growing over 2x faster than M) is measured again, and flagged if it stays out of line"
        f" ({flagged} flagged here).\n"
    )
