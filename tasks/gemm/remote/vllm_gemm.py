"""vLLM's own GEMM kernels, prepared the way its server prepares a checkpoint's weights, for the
GEMM microbenchmark. Int4 weights are quantized once and the packed result cloned for each
rotated copy: the kernel's time does not depend on the values. Each builder returns (one function per weight copy, reference weights
[N, K] in bf16 or None when the inputs are the references, kernel name), or (None, None, why
not) so the caller falls back to a torch kernel and says so. Nothing here runs without vLLM.
"""

import torch


def _vllm_import_error():
    try:
        import vllm._custom_ops  # noqa: F401
    except Exception as err:  # noqa: BLE001 - any import failure means: no vLLM kernels here
        return f"vLLM's kernels not importable ({type(err).__name__})"
    return None


def machete(weights, group_size):
    """W4A16 as vLLM 0.26 serves int4 checkpoints (compressed-tensors pack-quantized, GPTQ) on
    Hopper: MacheteLinearKernel, uint4b8 weights in symmetric groups, prepacked for Machete
    (`MacheteLinearKernel.process_weights_after_loading`)."""
    why = _vllm_import_error()
    if why:
        return None, None, why
    import vllm._custom_ops as ops
    from vllm.model_executor.layers.quantization.utils.quant_utils import (
        pack_quantized_values_into_int32,
        quantize_weights,
    )
    from vllm.scalar_type import scalar_types

    if torch.cuda.get_device_capability()[0] != 9 or not hasattr(torch.ops._C, "machete_mm"):
        return None, None, "Machete needs vLLM's kernels on a Hopper GPU"
    uint4 = scalar_types.uint4b8
    try:
        w_ref, w_q, w_s, _ = quantize_weights(weights[0].t().contiguous(), uint4, group_size, zero_points=False)
        packed = pack_quantized_values_into_int32(w_q, uint4, packed_dim=0)
        b_q = ops.machete_prepack_B(
            packed.t().contiguous().t(), a_type=torch.bfloat16, b_type=uint4, group_scales_type=torch.bfloat16
        )
        scales = w_s.to(torch.bfloat16).contiguous()
        copies = [(b_q.clone(), scales.clone()) for _ in weights]
        fns = [
            lambda a, b_q=b_q, scales=scales: ops.machete_mm(
                a=a, b_q=b_q, b_type=uint4, b_group_scales=scales, b_group_size=group_size
            )
            for b_q, scales in copies
        ]
        fns[0](torch.randn(1, weights[0].shape[1], dtype=torch.bfloat16, device=weights[0].device))
    except (RuntimeError, NotImplementedError, AssertionError) as err:
        return None, None, f"Machete refused the shape: {str(err).splitlines()[0][:120]}"
    return (
        fns,
        [w_ref.t().to(torch.bfloat16)] * len(weights),
        "vLLM machete_mm (CUTLASS W4A16, vLLM's int4 kernel on Hopper)",
    )


def marlin_pack(weight_nk, group_size):
    """One bf16 [N, K] weight as the server's MarlinLinearKernel holds it: uint4b8 symmetric groups
    packed GPTQ-style along K, repacked on the GPU by `gptq_marlin_repack`, scales permuted
    (`MarlinLinearKernel.process_weights_after_loading`). Returns (q_w, scales, reference [N, K])."""
    import vllm._custom_ops as ops
    from vllm.model_executor.layers.quantization.utils.marlin_utils import marlin_permute_scales
    from vllm.model_executor.layers.quantization.utils.quant_utils import (
        pack_quantized_values_into_int32,
        quantize_weights,
    )
    from vllm.scalar_type import scalar_types

    n, k = weight_nk.shape
    w_ref, w_q, w_s, _ = quantize_weights(
        weight_nk.t().contiguous(), scalar_types.uint4b8, group_size, zero_points=False
    )
    packed = pack_quantized_values_into_int32(w_q, scalar_types.uint4b8, packed_dim=0)  # [K / 8, N]
    no_perm = torch.empty(0, dtype=torch.int, device=weight_nk.device)
    q_w = ops.gptq_marlin_repack(packed.contiguous(), no_perm, k, n, 4)
    scales = marlin_permute_scales(w_s.to(torch.bfloat16).contiguous(), k, n, group_size)
    return q_w, scales, w_ref.t().to(torch.bfloat16)


def marlin(weights, group_size):
    """W4A16 through vLLM's Marlin (MarlinLinearKernel: no act-order), called through
    `apply_gptq_marlin_linear` as the server calls it."""
    why = _vllm_import_error()
    if why:
        return None, None, why
    from vllm.model_executor.layers.quantization.utils.marlin_utils import (
        apply_gptq_marlin_linear,
        marlin_make_workspace_new,
    )
    from vllm.scalar_type import scalar_types

    uint4 = scalar_types.uint4b8
    n, k = weights[0].shape
    device = weights[0].device
    try:
        workspace = marlin_make_workspace_new(device)
        empty = torch.empty(0, dtype=torch.int, device=device)  # no zero points, no act-order
        q_w, scales, w_ref = marlin_pack(weights[0], group_size)
        copies = [(q_w.clone(), scales.clone()) for _ in weights]
        fns = [
            lambda a, q_w=q_w, scales=scales: apply_gptq_marlin_linear(
                a, q_w, scales, empty, empty, empty, workspace, uint4, n, k, is_k_full=True
            )
            for q_w, scales in copies
        ]
        fns[0](torch.randn(1, k, dtype=torch.bfloat16, device=device))
    except (RuntimeError, NotImplementedError, AssertionError, ValueError) as err:
        return None, None, f"Marlin refused the shape: {str(err).splitlines()[0][:120]}"
    return fns, [w_ref] * len(weights), "vLLM marlin_gemm (Marlin W4A16, gptq_marlin layout)"


W4A16_BUILDERS = {"machete": (machete,), "marlin": (marlin,), "auto": (machete, marlin)}


def w4a16(weights, group_size, choice):
    """The server's W4A16 kernel: the one its log named, or vLLM's own order of preference
    (Machete on Hopper, then Marlin) when ``choice`` is 'auto'. Reasons for every refusal."""
    reasons = []
    for builder in W4A16_BUILDERS[choice]:
        fns, references, kernel = builder(weights, group_size)
        if fns is not None:
            return fns, references, kernel
        reasons.append(kernel)
    return None, None, "; ".join(reasons)


def cutlass_scaled_mm():
    """vLLM's FP8 GEMM (`cutlass_scaled_mm`: per-token x per-channel scales, or DeepSeek-V3's
    1 x B activation groups x B x B weight blocks on Hopper) as a function of the same operands
    torch._scaled_mm takes; None when vLLM's CUDA kernels are not here."""
    if _vllm_import_error() or not hasattr(torch.ops._C, "cutlass_scaled_mm"):
        return None
    import vllm._custom_ops as ops

    def matmul(a_q, w_q_t, a_scale, w_scale):
        return ops.cutlass_scaled_mm(a_q, w_q_t, scale_a=a_scale, scale_b=w_scale, out_dtype=torch.bfloat16)

    return matmul


def cpu_linear(weights):
    """The CPU GEMM vLLM's server runs for a bf16 linear layer, chosen as its CPU dispatch does
    (`dispatch_cpu_unquantized_gemm`): sgl's AMX `weight_packed_linear` for small weights on AMX
    CPUs, else oneDNN `onednn_mm` on a handler made from the weight. Returns (functions, kernel
    name), or (None, why not) when vLLM's CPU ops are not importable or, as on some AVX2 CPUs, the
    oneDNN handler cannot be made (the server then runs torch's linear, as the caller does)."""
    try:
        import vllm._custom_ops as ops
        from vllm.model_executor.layers.utils import check_cpu_sgl_kernel
    except Exception as err:  # noqa: BLE001 - any import failure means: not vLLM's CPU build
        return None, f"vLLM's CPU ops not importable ({type(err).__name__})"
    n, k = weights[0].shape
    try:
        if check_cpu_sgl_kernel(n, k, weights[0].dtype):
            packed = [torch.ops._C.convert_weight_packed(w) for w in weights]
            return (
                [(lambda a, p=p: ops.weight_packed_linear_cpu(a, p, n, None)) for p in packed],
                "vLLM _C::weight_packed_linear (sgl AMX, as the server)",
            )
        if ops._supports_onednn:
            handlers = [ops.create_onednn_mm(w.t(), 32) for w in weights]
            return (
                [(lambda a, h=h: ops.onednn_mm(h, a, None)) for h in handlers],
                "vLLM _C::onednn_mm (oneDNN, as the server)",
            )
    except RuntimeError as err:  # as vLLM's own dispatch: its server runs torch's linear then too
        return (
            None,
            f"vLLM's CPU GEMM cannot be made on this CPU, so its server runs this too: {str(err).splitlines()[0][:120]}",
        )
    return None, "this vLLM build has no oneDNN GEMM"
