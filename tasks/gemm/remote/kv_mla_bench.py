"""The FP8 KV-cache micro for MLA models (DeepSeek-V3, Kimi-K2): one attention layer's decode work
as vLLM 0.26 runs it with the latent cache in bf16 and in FP8. On Hopper the two take different
backends: FLASH_ATTN_MLA serves bf16 and lists no FP8 KV dtype, so `--kv-cache-dtype fp8` moves
decode attention to TRITON_MLA (FlashMLA, which vLLM would rank ahead, is not in every build; the
H100 campaign's server chose TRITON_MLA from ['FLASH_ATTN_MLA', 'TRITON_MLA']). The option's cost is
that backend change, timed here kernel by kernel as each backend's ``forward_mqa`` calls them:

- write (both): `concat_and_cache_mla` of the step's latent and rope key (FP8: quantised on the way in);
- bf16 attention: FlashAttention-3 `flash_attn_varlen_func` with the rope query as q, the latent as v
  and the absorbed query as ``q_v``, its scheduler metadata made ahead with the split bound vLLM's
  FlashAttnMLA passes under full CUDA graphs (flash_attn_max_num_splits_for_cuda_graph, 32: the
  server's trace runs FA3's split-KV combine after the attention), and that combine kernel;
- FP8 attention: the Triton backend's query concatenation, its zeroed output and LSE, and
  `decode_attention_fwd` (split-KV stage 1 and stage 2) over the FP8 cache with the layer's scale,
  the splits as vLLM computes them from the captured graphs' sequence bound (max_model_len): the
  H100 trace's stage-1 grid held 4 splits at max_model_len 2048.

Imported by kv_bench.py when its spec names ``mla``: {"heads", "kv_lora_rank", "rope_dim", "nope_dim"} (per
rank), plus ``max_model_len``; each row has kv_bench's fields, its cold pass included.
First run on an H100 on 2026-12-06 (benchmarks/kv_mla_micro.py): the FP8 side matched the server's trace
(15.04 µs a layer against 14.91 at one sequence); the bf16 side, then timed with no split bound, ran FA3
unsplit and came out 13.40 against the trace's 18.88 (its 4.54 µs combine missing), so the option read
as a loss where it was a gain: hence the bound below. Where a kernel refuses its arguments the row is
skipped with the reason and the option keeps its stated assumption."""

import math

import torch
from bench_timing import time_rotations

FLUSH_BYTES = 256 << 20
MAX_COPIES = 48
MIN_WORK_PER_SPLIT, SPLIT_OCCUPANCY = 512, 2
"""vLLM 0.26 triton_mla.py: _MIN_WORK_PER_SPLIT, _SPLIT_OCCUPANCY_MULTIPLIER."""


def kernels():
    from vllm._custom_ops import concat_and_cache_mla
    from vllm.v1.attention.ops.triton_decode_attention import decode_attention_fwd
    from vllm.vllm_flash_attn import flash_attn_varlen_func, get_scheduler_metadata

    return concat_and_cache_mla, flash_attn_varlen_func, get_scheduler_metadata, decode_attention_fwd


def triton_splits(max_seq_len: int, sm_count: int) -> int:
    """vLLM's `_compute_num_kv_splits`: a power of two of 512-token chunks, capped by the SMs."""
    ideal = 1 << max(0, math.ceil(math.log2(max(1, max_seq_len // MIN_WORK_PER_SPLIT))))
    return min(ideal, sm_count * SPLIT_OCCUPANCY)


def other_backend(fp8):
    """Why vLLM would run another backend than the one timed here, or None: off Hopper it ranks other
    MLA backends first; with FlashMLA installed it takes FLASHMLA for an FP8 cache (ranked ahead of
    TRITON_MLA; not in the payload the H100 campaigns ran)."""
    if torch.cuda.get_device_capability()[0] != 9:
        return "vLLM ranks other MLA backends first off Hopper (SM90): not timed"
    if fp8:
        try:
            from vllm.v1.attention.ops.flashmla import is_flashmla_dense_supported

            if is_flashmla_dense_supported()[0]:
                return "FlashMLA is installed: vLLM runs FLASHMLA for the FP8 cache here, not TRITON_MLA (not timed)"
        except Exception:  # noqa: BLE001 - no FlashMLA module: TRITON_MLA is vLLM's choice
            pass
    return None


def bench_point(spec, m, context, kv_dtype, repeats, ops, cold_parts, max_splits):
    """One point's row (kv_bench.py's fields); ``cold_parts`` is kv_bench's cold pass, ``max_splits``
    FA3's split bound under full CUDA graphs (kv_bench.MAX_SPLITS, as the server passes it)."""
    why = other_backend(kv_dtype == "fp8")
    if why:
        return {"m": m, "context": context, "kv_dtype": kv_dtype, "skipped": why}
    write_op, fa_op, schedule, triton_op = ops
    mla = spec["mla"]
    heads, lora, rope, nope = mla["heads"], mla["kv_lora_rank"], mla["rope_dim"], mla["nope_dim"]
    block = spec["block_size"]
    fp8 = kv_dtype == "fp8"
    device = "cuda"
    blocks_each = math.ceil((context + 1) / block)
    cache_bytes = m * blocks_each * block * (lora + rope) * (1 if fp8 else 2)
    copies = max(2, min(MAX_COPIES, math.ceil(FLUSH_BYTES / max(1, cache_bytes))))
    layers = []
    for _ in range(copies):
        storage = torch.uint8 if fp8 else torch.bfloat16
        cache = torch.zeros(m * blocks_each, block, lora + rope, dtype=storage, device=device)
        if not fp8:
            cache.normal_()
        table = torch.randperm(m * blocks_each, device=device, dtype=torch.int32).view(m, blocks_each)
        slots = (table[:, context // block] * block + context % block).to(torch.int64)
        layers.append((cache, table, slots, torch.ones(1, dtype=torch.float32, device=device)))
    # the server's latent and rope key are views into the fused_qkv_a projection's output
    kv_a = torch.randn(m, lora + rope, dtype=torch.bfloat16, device=device)
    kv_c, k_pe = kv_a[:, :lora], kv_a[:, lora:]
    # the absorbed query: the W_UK bmm's (heads, m, latent) output seen as (m, heads, latent); the rope
    # query: the tail of q_b_proj's (m, heads, nope + rope) output
    q_nope = torch.randn(heads, m, lora, dtype=torch.bfloat16, device=device).transpose(0, 1)
    q_pe = torch.randn(m, heads, nope + rope, dtype=torch.bfloat16, device=device)[..., -rope:]
    kv_made, nope_made, pe_made = kv_a.clone(), q_nope.clone(), q_pe.clone()
    cu_q = torch.arange(m + 1, dtype=torch.int32, device=device)
    seq_lens = torch.full((m,), context + 1, dtype=torch.int32, device=device)
    scale = (nope + rope) ** -0.5  # the model's qk head dim, as vLLM's MLA layer scales
    notes = []

    def write(layer):
        cache, _, slots, k_scale = layer
        return lambda: write_op(kv_c, k_pe, cache, slots, kv_dtype, k_scale)

    if fp8:
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        splits = triton_splits(int(spec.get("max_model_len") or context + 1), sms)
        logits = torch.empty(m, heads, splits, lora + 1, dtype=torch.float32, device=device)

        def attend(layer):
            cache, table, _, k_scale = layer
            latent = cache.view(torch.float8_e4m3fn).unsqueeze(2)

            def call():
                q = torch.cat((q_nope, q_pe), dim=-1)
                out = torch.zeros(m, heads, lora, dtype=q.dtype, device=device)
                lse = torch.zeros(m, heads, dtype=q.dtype, device=device)
                triton_op(
                    q,
                    latent,
                    latent[..., :lora],
                    out,
                    lse,
                    table,
                    seq_lens,
                    logits,
                    splits,
                    scale,
                    block,
                    k_scale=k_scale,
                    v_scale=k_scale,
                    is_mla=True,
                )

            return call

        kernel = f"vLLM concat_and_cache_mla (fp8) + TRITON_MLA decode_attention_fwd ({splits} splits)"
    else:
        metadata = schedule(
            batch_size=m,
            max_seqlen_q=1,
            max_seqlen_k=context + 1,
            num_heads_q=heads,
            num_heads_kv=1,
            headdim=rope,
            cache_seqlens=seq_lens,
            qkv_dtype=torch.bfloat16,
            headdim_v=lora,
            page_size=block,
            cu_seqlens_q=cu_q,
            causal=True,
            num_splits=max_splits,
        )

        def attend(layer):
            cache, table, _, _ = layer
            return lambda: fa_op(
                q=q_pe,
                k=cache[..., lora:].unsqueeze(-2),
                v=cache[..., :lora].unsqueeze(-2),
                q_v=q_nope,
                max_seqlen_q=1,
                cu_seqlens_q=cu_q,
                max_seqlen_k=context + 1,
                seqused_k=seq_lens,
                block_table=table,
                softmax_scale=scale,
                causal=True,
                fa_version=3,
                scheduler_metadata=metadata,
                num_splits=max_splits,
            )

        kernel = "vLLM concat_and_cache_mla + FLASH_ATTN_MLA flash_attn_varlen_func (FA3, q_v)"
    row = {"m": m, "context": context, "kv_dtype": kv_dtype, "rotated_copies": copies, "block_size": block}
    write_s, timing = time_rotations([write(layer) for layer in layers], device, repeats, kernel_durations=True)
    attention_s, attention_timing = time_rotations(
        [attend(layer) for layer in layers], device, repeats, kernel_durations=True
    )
    profiled = {**timing.get("kernels_us", {}), **attention_timing.get("kernels_us", {})}
    if "error" in profiled:
        notes.append(f"kernels not profiled ({profiled.pop('error')})")
    row["kernels_us"] = profiled or None
    parts = {"write": timing.get("kernels_us", {}), "attention": attention_timing.get("kernels_us", {})}

    def remake():  # what the kernels before the write leave in the L2: the projections' outputs
        kv_a.copy_(kv_made)
        q_nope.copy_(nope_made)
        q_pe.copy_(pe_made)

    row.update(cold_parts(layers, write, attend, parts, remake, notes))
    row.update(
        write_us=write_s * 1e6,
        attention_us=attention_s * 1e6,
        us=(write_s + attention_s) * 1e6,
        timing=timing.get("timing"),
        kernel=kernel,
    )
    if notes:
        row["note"] = "; ".join(notes)
    return row
