"""Fused-MoE microbenchmark: one MoE layer's routed experts (both GEMMs, the activation, the
token alignment and the weighted sum) at decode sizes, the way vLLM's server runs them.

Tokens are routed at random (each token to top_k distinct experts, weights normalized), with a
fresh routing and activations for each rotated call, so the experts a call touches vary as
they do in serving. Kernels: vLLM's Triton `fused_experts` for bf16 experts and its
`fused_marlin_moe` (Marlin-MoE, uint4b8 symmetric groups) for int4 experts; without vLLM, bf16
experts fall back to a torch per-expert loop (named in the row) and int4 ones are skipped; on
CPU too (vLLM's CPU MoE, AMX-packed, is not reproduced).
The routing itself (top-k gating) is not timed: the trace's routing kernels are set apart.
"""

import torch
from bench_timing import relative_error, time_rotations

ROTATIONS = 8
# Int4 experts: this many quantized and packed, the others cloned from them (own memory, same
# values): the kernel's time does not depend on the values, and the routing picks any expert.
DISTINCT_EXPERTS = 4


def random_routing(m, experts, top_k, device):
    ids = torch.stack([torch.randperm(experts, device=device)[:top_k] for _ in range(m)]).to(torch.int32)
    weights = torch.rand(m, top_k, device=device, dtype=torch.float32) + 0.1
    return weights / weights.sum(dim=-1, keepdim=True), ids


def reference_moe(x, w13, w2, weights, ids):
    """float32 MoE over the experts' reference weights (w13[e]: [2N, K], w2[e]: [K, N]); vLLM's
    activation: silu of the first half times the second half."""
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for t in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            h = w13[e].float() @ x[t].float()
            half = h.shape[0] // 2
            out[t] += weights[t, j] * (w2[e].float() @ (torch.nn.functional.silu(h[:half]) * h[half:]))
    return out


def torch_moe(x, w13, w2, weights, ids):
    out = torch.zeros_like(x)
    for e in ids.unique().tolist():
        tokens, slots = (ids == e).nonzero(as_tuple=True)
        h = x[tokens] @ w13[e].t()
        half = h.shape[1] // 2
        act = torch.nn.functional.silu(h[:, :half]) * h[:, half:]
        out.index_add_(0, tokens, (act @ w2[e].t()) * weights[tokens, slots, None].to(x.dtype))
    return out


def triton_experts(experts, k, n, device):
    """bf16 experts for vLLM's Triton fused_experts (weights are their own references)."""
    from vllm.model_executor.layers.fused_moe.fused_moe import fused_experts

    w13 = torch.randn(experts, 2 * n, k, dtype=torch.bfloat16, device=device) * 0.02
    w2 = torch.randn(experts, k, n, dtype=torch.bfloat16, device=device) * 0.02

    def run(x, weights, ids):
        return fused_experts(x, w13, w2, weights, ids)

    return run, w13, w2, "vLLM fused_experts (Triton fused_moe_kernel, bf16)"


def marlin_experts(experts, k, n, group_size, device, needed):
    """int4 experts in vLLM's Marlin-MoE layout; reference (dequantized) weights kept only for the
    experts in ``needed`` (the checked routing)."""
    import vllm._custom_ops as ops

    try:  # vLLM 0.26 keeps it under experts/, earlier releases one level up
        from vllm.model_executor.layers.fused_moe.experts.marlin_moe import fused_marlin_moe
    except ImportError:
        from vllm.model_executor.layers.fused_moe.fused_marlin_moe import fused_marlin_moe
    from vllm.model_executor.layers.quantization.utils.marlin_utils import marlin_make_workspace_new
    from vllm.scalar_type import scalar_types
    from vllm_gemm import marlin_pack

    uint4 = scalar_types.uint4b8
    distinct = {}  # a few distinct quantized experts, cloned for the rest (see DISTINCT_EXPERTS)
    for e in range(min(DISTINCT_EXPERTS, experts)):
        pair = []
        for weight in (
            torch.randn(2 * n, k, dtype=torch.bfloat16, device=device) * 0.02,
            torch.randn(k, n, dtype=torch.bfloat16, device=device) * 0.02,
        ):
            pair.append(marlin_pack(weight, group_size))
        distinct[e] = pair
    source = [distinct[e % len(distinct)] for e in range(experts)]
    q13, s13, q2, s2 = (
        torch.stack([pair[which][part].clone() for pair in source]) for which, part in ((0, 0), (0, 1), (1, 0), (1, 1))
    )
    ref13 = {e: source[e][0][2] for e in needed}
    ref2 = {e: source[e][1][2] for e in needed}
    workspace = marlin_make_workspace_new(torch.device(device), 4)

    def moe_sum(per_slot, output, *_):  # the server's sum over top-k (MarlinExperts.moe_sum)
        ops.moe_sum(per_slot, output)
        return output

    def run(x, weights, ids):
        return fused_marlin_moe(
            x, q13, q2, None, None, s13, s2, weights, ids, quant_type_id=uint4.id, workspace=workspace, moe_sum=moe_sum
        )

    return run, ref13, ref2, f"vLLM fused_marlin_moe (Marlin-MoE W4A16, group {group_size})"


def bench_fused_moe(shape, device, repeats, group_size, do_bench):
    m, k, n, experts, top_k = shape["m"], shape["k"], shape["n"], shape["experts"], shape["top_k"]
    dtype = shape["dtype"]
    row = {**shape, "device": device, "rotated_copies": ROTATIONS}
    routings = [random_routing(m, experts, top_k, device) for _ in range(ROTATIONS)]
    activations = [torch.randn(m, k, dtype=torch.bfloat16, device=device) for _ in range(ROTATIONS)]
    fallback = None if device == "cuda" else "vLLM's fused-MoE kernels timed here are its CUDA ones"
    try:
        if fallback:
            pass
        elif dtype == "w4a16":
            if k % group_size or n % group_size:
                return {**row, "skipped": f"K={k} or N={n} not a multiple of group size {group_size}"}
            run, ref13, ref2, kernel = marlin_experts(
                experts, k, n, group_size, device, set(routings[0][1].flatten().tolist())
            )
            row["group_size"] = group_size
        elif dtype == "bf16":
            run, ref13, ref2, kernel = triton_experts(experts, k, n, device)
        else:
            return {**row, "skipped": f"no fused-MoE benchmark for {dtype} experts yet"}
    except Exception as err:  # noqa: BLE001 - no vLLM, or its MoE library (c3) missing
        fallback = f"{type(err).__name__}: {str(err).splitlines()[0][:120]}" if str(err) else type(err).__name__
    if fallback is not None:
        if dtype != "bf16":
            return {**row, "skipped": f"vLLM's fused-MoE kernels unavailable ({fallback})"}
        ref13 = torch.randn(experts, 2 * n, k, dtype=torch.bfloat16, device=device) * 0.02
        ref2 = torch.randn(experts, k, n, dtype=torch.bfloat16, device=device) * 0.02

        def run(x, weights, ids):
            return torch_moe(x, ref13, ref2, weights, ids)

        kernel = f"torch per-expert loop (fallback: {fallback})"
    row["kernel"] = kernel
    out = run(activations[0], *routings[0])
    error = relative_error(out, reference_moe(activations[0], ref13, ref2, *routings[0]))
    row["relative_error_vs_bf16_reference"] = error
    if error > 0.05:
        return {**row, "skipped": f"result disagrees with the reference (relative error {error:.3g})"}
    calls = [(lambda x=x, r=r: run(x, *r)) for x, r in zip(activations, routings, strict=True)]
    seconds, timing = time_rotations(calls, device, repeats, do_bench)
    # Bytes: the weights of the experts a call touches (expected distinct experts), in and out.
    touched = experts * (1 - (1 - top_k / experts) ** m)
    weight_bytes = 3 * k * n * (0.5 if dtype == "w4a16" else 2)
    if dtype == "w4a16":
        weight_bytes += 3 * (k * n // group_size) * 2
    moved = touched * weight_bytes + 2 * m * k * 2
    row.update(
        timing,
        us=seconds * 1e6,
        tflops=2 * m * top_k * 3 * k * n / seconds / 1e12,
        gbps=moved / seconds / 1e9,
        bytes_moved=int(moved),
        experts_touched=touched,
    )
    return row
