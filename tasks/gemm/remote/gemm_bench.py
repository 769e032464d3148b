"""GEMM microbenchmarks at given shapes on the host's accelerator (torch and stdlib only).

usage: gemm_bench.py SHAPES_JSON [--repeats N] [--group-size G] [--fp8-block B] [--compare-do-bench]
SHAPES_JSON: a list of {"name", "m", "k", "n", "dtype": "bf16"|"w4a16"|"fp8"}.

FP8 (e4m3) runs through torch._scaled_mm with the finest scaling the host's torch supports:
DeepSeek-V3's recipe (weights in B x B blocks, activations in 1 x B groups) where B is given
and the kernel exists, else per-channel/per-token scales, else one scale a tensor. Activations
are quantized before timing (vLLM quantizes them in a separate small kernel), so the figure is
the GEMM's own.

Each kernel is checked against a bf16 reference before it is timed. Timing: warmup, then the
median over repeats of a timed batch of calls; CUDA events on GPU (around CUDA graph replays
when capture works), perf_counter on CPU. Weights and activations rotate over enough copies
that the working set exceeds the last-level cache, so caches do not flatter small shapes.
A device-to-device copy of a large buffer, measured in the same run, is the bandwidth ceiling.
Prints one JSON document.
"""

import argparse
import json
import statistics
import time

import torch

CACHE_FLUSH_BYTES = 512 << 20  # working set per rotation: well above an H200's 50 MB L2


def timer(device):
    if device == "cuda":
        def measure(fn, calls):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1000 / calls
    else:
        def measure(fn, calls):
            started = time.perf_counter()
            for _ in range(calls):
                fn()
            return (time.perf_counter() - started) / calls
    return measure


def median_seconds(fn, device, repeats, calls):
    measure = timer(device)
    for _ in range(3):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return statistics.median(measure(fn, calls) for _ in range(repeats))


def copy_ceiling_gbps(device, repeats):
    size = (1 << 30) if device == "cuda" else (256 << 20)
    src = torch.empty(size, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    seconds = median_seconds(lambda: dst.copy_(src), device, repeats, 5)
    return 2 * size / seconds / 1e9  # read + write


def int4_pack(weight_nk, group_size, device):
    """Quantize a bf16 N x K weight to int4 (asymmetric, per group) for torch's int4 kernels.

    Returns (packed, scales_and_zeros, dequantized N x K bf16) so the kernel can be checked
    against a bf16 matmul with exactly the weights it multiplies.
    """
    n, k = weight_nk.shape
    w = weight_nk.float().reshape(n, k // group_size, group_size)
    w_min, w_max = w.amin(dim=-1, keepdim=True), w.amax(dim=-1, keepdim=True)
    scales = ((w_max - w_min).clamp(min=1e-6) / 15)
    zeros = w_min + scales * 8
    q = torch.clamp(torch.round((w - w_min) / scales), 0, 15).to(torch.int32)
    dequant = ((q.float() - 8) * scales + zeros).reshape(n, k).to(torch.bfloat16)
    q = q.reshape(n, k)
    scales_and_zeros = torch.stack([scales.squeeze(-1), zeros.squeeze(-1)], dim=-1)
    scales_and_zeros = scales_and_zeros.transpose(0, 1).contiguous().to(torch.bfloat16)
    if device == "cuda":
        uint8 = (q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8)
        packed = torch.ops.aten._convert_weight_to_int4pack(uint8, 8)

        def matmul(a):
            return torch.ops.aten._weight_int4pack_mm(a, packed, group_size, scales_and_zeros)
        kernel = "torch._weight_int4pack_mm (tinygemm)"
    else:
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)

        def matmul(a):
            return torch.ops.aten._weight_int4pack_mm_for_cpu(a, packed, group_size, scales_and_zeros)
        kernel = "torch._weight_int4pack_mm_for_cpu"
    return matmul, dequant, kernel


FP8 = getattr(torch, "float8_e4m3fn", None)
FP8_MAX = 448.0


def fp8_scaled(x, rows, cols):
    """Quantize a 2-D tensor to e4m3 with one float32 scale per rows x cols tile.
    Returns (fp8 tensor, scales of shape (R/rows, C/cols), dequantized float copy)."""
    r, c = x.shape
    tiles = x.float().reshape(r // rows, rows, c // cols, cols)
    scale = tiles.abs().amax(dim=(1, 3), keepdim=True).clamp(min=1e-12) / FP8_MAX
    q = (tiles / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8)
    return q.reshape(r, c), scale.reshape(r // rows, c // cols), (q.float() * scale).reshape(r, c)


def fp8_pack(weight_nk, activation_mk, block, device, only_mode=None):
    """FP8 operands and a matmul over them, trying the finest scaling first (or only
    ``only_mode``, once chosen for a shape). Returns (matmul, dequantized weight, dequantized
    activation, kernel, mode, why finer scalings failed)."""
    m, k = activation_mk.shape
    n = weight_nk.shape[0]
    modes = []
    # Blockwise only where the scale buffers' rows are whole 16-byte units (K/B and M multiples
    # of 4): on an H200 (torch 2.11, cu130) other shapes were accepted and then returned garbage
    # (K/B = 2, 18) or hit an illegal memory access that poisons the whole CUDA context, which
    # no fallback survives.
    if block and device == "cuda" and k % (4 * block) == 0 and n % block == 0 and m % 4 == 0:
        modes.append(("blockwise", (1, block), (block, block)))
    modes += [("rowwise", (1, k), (1, k)), ("tensorwise", (m, k), (n, k))]
    if only_mode:
        modes = [mode for mode in modes if mode[0] == only_mode]
    errors = []
    for mode, a_tile, w_tile in modes:
        a_q, a_scale, a_deq = fp8_scaled(activation_mk, *a_tile)
        w_q, w_scale, w_deq = fp8_scaled(weight_nk, *w_tile)
        if mode == "blockwise":
            # cuBLAS wants both scale tensors outer-dim-major: the 1 x B activation scales as an
            # (M, K/B) view of a K/B x M buffer, the weight scales as the (K/B, N/B) transpose
            # of their N/B x K/B buffer (any other layout: "Invalid scaling configuration").
            a_scale, w_scale = a_scale.t().contiguous().t(), w_scale.t()
        elif mode == "rowwise":
            w_scale = w_scale.reshape(1, n)
        else:
            a_scale, w_scale = a_scale.reshape(()), w_scale.reshape(())

        def matmul(_a, a_q=a_q, w_q=w_q, a_scale=a_scale, w_scale=w_scale):
            return torch._scaled_mm(a_q, w_q.t(), scale_a=a_scale, scale_b=w_scale, out_dtype=torch.bfloat16)
        try:
            out = matmul(None).float()
        except (RuntimeError, NotImplementedError) as err:
            errors.append(f"{mode}: {str(err).splitlines()[0][:120]}")
            continue
        # A scaling the kernel accepts can still compute garbage (see above): check, fall back.
        reference = a_deq @ w_deq.t()
        error = ((out - reference).norm() / reference.norm().clamp(min=1e-12)).item()
        if error > 0.05:
            errors.append(f"{mode}: wrong result (relative error {error:.3g})")
            continue
        return matmul, w_deq.to(torch.bfloat16), a_deq, f"torch._scaled_mm fp8 e4m3, {mode} scales", mode, errors
    raise RuntimeError("; ".join(errors))


def vllm_machete(weights, group_size):
    """W4A16 as vLLM serves int4 checkpoints (compressed-tensors pack-quantized, GPTQ) on Hopper:
    its MacheteLinearKernel, uint4b8 weights in symmetric groups, prepacked for Machete (vLLM 0.26
    `MacheteLinearKernel.process_weights_after_loading`). Returns (functions, dequantized [N, K]
    reference weights, kernel name), or (None, None, why not)."""
    try:
        import vllm._custom_ops as ops
        from vllm.model_executor.layers.quantization.utils.quant_utils import (
            pack_quantized_values_into_int32,
            quantize_weights,
        )
        from vllm.scalar_type import scalar_types
    except Exception as err:  # noqa: BLE001 - any import failure means: no vLLM CUDA kernels here
        return None, None, f"vLLM's kernels not importable ({type(err).__name__})"
    if torch.cuda.get_device_capability()[0] != 9 or not hasattr(torch.ops._C, "machete_mm"):
        return None, None, "Machete needs vLLM's kernels on a Hopper GPU"
    uint4 = scalar_types.uint4b8
    fns, references = [], []
    try:
        for weight_nk in weights:
            w_ref, w_q, w_s, _ = quantize_weights(weight_nk.t().contiguous(), uint4, group_size, zero_points=False)
            packed = pack_quantized_values_into_int32(w_q, uint4, packed_dim=0)
            b_q = ops.machete_prepack_B(packed.t().contiguous().t(), a_type=torch.bfloat16, b_type=uint4,
                                        group_scales_type=torch.bfloat16)
            scales = w_s.to(torch.bfloat16).contiguous()
            fns.append(lambda a, b_q=b_q, scales=scales: ops.machete_mm(
                a=a, b_q=b_q, b_type=uint4, b_group_scales=scales, b_group_size=group_size))
            references.append(w_ref.t().to(torch.bfloat16))
        fns[0](torch.randn(1, weights[0].shape[1], dtype=torch.bfloat16, device=weights[0].device))
    except (RuntimeError, NotImplementedError, AssertionError) as err:
        return None, None, f"Machete refused the shape: {str(err).splitlines()[0][:120]}"
    return fns, references, "vLLM machete_mm (CUTLASS W4A16, vLLM's int4 kernel on Hopper)"


def vllm_cpu_linear(weights):
    """The CPU GEMM vLLM's server runs for a bf16 linear layer, chosen as its CPU dispatch does
    (vLLM 0.32 `dispatch_cpu_unquantized_gemm`): sgl's AMX `weight_packed_linear` for small
    weights on AMX CPUs, else oneDNN `onednn_mm` on a handler made from the weight. Returns
    (functions, kernel name), or (None, why not) when vLLM's CPU ops are not importable."""
    try:
        import vllm._custom_ops as ops
        from vllm.model_executor.layers.utils import check_cpu_sgl_kernel
    except Exception as err:  # noqa: BLE001 - any import failure means: not vLLM's CPU build
        return None, f"vLLM's CPU ops not importable ({type(err).__name__})"
    n, k = weights[0].shape
    try:
        if check_cpu_sgl_kernel(n, k, weights[0].dtype):
            packed = [torch.ops._C.convert_weight_packed(w) for w in weights]
            return ([(lambda a, p=p: ops.weight_packed_linear_cpu(a, p, n, None)) for p in packed],
                    "vLLM _C::weight_packed_linear (sgl AMX, as the server)")
        if ops._supports_onednn:
            handlers = [ops.create_onednn_mm(w.t(), 32) for w in weights]
            return ([(lambda a, h=h: ops.onednn_mm(h, a, None)) for h in handlers],
                    "vLLM _C::onednn_mm (oneDNN, as the server)")
    except RuntimeError as err:
        return None, f"vLLM's CPU GEMM failed here: {str(err).splitlines()[0][:120]}"
    return None, "this vLLM build has no oneDNN GEMM"


def bench_shape(shape, device, repeats, group_size, fp8_block, do_bench):
    m, k, n = shape["m"], shape["k"], shape["n"]
    dtype = shape["dtype"]
    weight_bytes_per_copy = k * n * {"w4a16": 0.5, "fp8": 1}.get(dtype, 2)
    copies = max(1, min(64, int(CACHE_FLUSH_BYTES // max(1, weight_bytes_per_copy))))
    if device == "cpu":
        copies = min(copies, 8)
    activations = [torch.randn(m, k, dtype=torch.bfloat16, device=device) for _ in range(copies)]
    weights = [torch.randn(n, k, dtype=torch.bfloat16, device=device) * 0.02 for _ in range(copies)]
    row = {**shape, "device": device, "rotated_copies": copies}
    if dtype == "w4a16":
        if k % group_size:
            return {**row, "skipped": f"K={k} not a multiple of group size {group_size}"}
        fns, reference_weights, kernel = vllm_machete(weights, group_size) if device == "cuda" else (None, None, None)
        if fns is None:
            try:
                packed = [int4_pack(w, group_size, device) for w in weights]
            except (RuntimeError, NotImplementedError) as err:
                return {**row, "skipped": f"int4 kernel unavailable: {str(err).splitlines()[0][:200]}"}
            fns = [p[0] for p in packed]
            reference_weights = [p[1] for p in packed]
            kernel = packed[0][2] + (f" (fallback: {kernel})" if kernel else "")
        row["kernel"] = kernel
        row["group_size"] = group_size
    elif dtype == "fp8":
        if FP8 is None:
            return {**row, "skipped": f"torch {torch.__version__} has no float8_e4m3fn"}
        try:
            # The scaling is chosen (and its fallbacks tried) once, on the first copy.
            first = fp8_pack(weights[0], activations[0], fp8_block, device)
            packed = [first] + [fp8_pack(w, a, fp8_block, device, only_mode=first[4])
                                for w, a in zip(weights[1:], activations[1:], strict=True)]
        except RuntimeError as err:
            return {**row, "skipped": f"fp8 kernel unavailable: {str(err)[:300]}"}
        fns = [p[0] for p in packed]
        reference_weights = [p[1] for p in packed]
        # The kernel multiplies the quantized activations: the reference must too.
        activations = [p[2].to(torch.bfloat16) for p in packed]
        row["kernel"] = packed[0][3]
        row["fp8_block"] = fp8_block
        if first[5]:
            row["fp8_finer_scaling_failed"] = first[5]
    else:
        fns, kernel = vllm_cpu_linear(weights) if device == "cpu" else (None, None)
        if fns is None:
            fns = [(lambda a, w=w: torch.nn.functional.linear(a, w)) for w in weights]
            kernel = ("torch.nn.functional.linear (cuBLAS)" if device == "cuda" else
                      f"torch.nn.functional.linear (oneDNN/MKL; fallback: {kernel})")
        reference_weights = weights
        row["kernel"] = kernel
    out = fns[0](activations[0])
    reference = activations[0].float() @ reference_weights[0].float().t()
    error = ((out.float() - reference).norm() / reference.norm().clamp(min=1e-12)).item()
    row["relative_error_vs_bf16_reference"] = error
    if error > 0.05:
        return {**row, "skipped": f"result disagrees with the bf16 reference (relative error {error:.3g})"}
    state = {"i": 0}

    def call():
        i = state["i"] = (state["i"] + 1) % copies
        fns[i](activations[i])

    calls = copies if device == "cuda" else max(1, min(copies, 4))
    seconds = None
    if device == "cuda":
        try:  # CUDA graph replay: launch overhead out of the measurement, as vLLM decodes
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                for i in range(copies):
                    fns[i](activations[i])
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for i in range(copies):
                    fns[i](activations[i])
            seconds = median_seconds(graph.replay, device, repeats, 1) / copies
            row["timing"] = "CUDA events around CUDA graph replays"
        except Exception as err:  # noqa: BLE001 - fall back to eager launches
            row["graph_error"] = str(err).splitlines()[0][:200]
    if seconds is None:
        seconds = median_seconds(call, device, repeats, calls)
        row["timing"] = "CUDA events, eager launches" if device == "cuda" else "perf_counter, median of repeats"
    flops = 2 * m * k * n
    moved = m * k * (1 if dtype == "fp8" else 2) + weight_bytes_per_copy + m * n * 2
    if dtype == "w4a16":
        moved += (k // group_size) * n * 2 * 2
    row.update(us=seconds * 1e6, tflops=flops / seconds / 1e12, gbps=moved / seconds / 1e9,
               bytes_moved=moved)
    if do_bench and device == "cuda":
        # Same rotating call, timed two ways by Triton: eager launches (do_bench) against our
        # eager timing, and CUDA-graph replays (do_bench_cudagraph) against our graph timing.
        import triton.testing

        row["eager_us"] = median_seconds(call, device, repeats, calls) * 1e6
        row["do_bench_us"] = triton.testing.do_bench(call, warmup=25, rep=200, return_mode="median") * 1e3
        if row["timing"].startswith("CUDA events around CUDA graph"):
            def graph_call():
                for i in range(copies):
                    fns[i](activations[i])
            row["do_bench_cudagraph_us"] = triton.testing.do_bench_cudagraph(
                graph_call, rep=200, return_mode="median") * 1e3 / copies
    return row


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("shapes")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--group-size", type=int, default=128)
    parser.add_argument("--fp8-block", type=int, default=128, help="0: per-channel scales")
    parser.add_argument("--compare-do-bench", action="store_true")
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    with open(args.shapes) as handle:
        shapes = json.load(handle)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    torch.manual_seed(0)
    ceiling = copy_ceiling_gbps(device, args.repeats)
    rows = []
    seen = {}
    for shape in shapes:
        key = (shape["m"], shape["k"], shape["n"], shape["dtype"])
        if key not in seen:
            with torch.no_grad():
                seen[key] = bench_shape(shape, device, args.repeats, args.group_size, args.fp8_block,
                                        args.compare_do_bench)
        row = {**seen[key], "name": shape["name"]}
        if "gbps" in row:
            row["pct_of_copy_ceiling"] = row["gbps"] / ceiling * 100
        rows.append(row)
    info = {"device": device, "torch": torch.__version__,
            "device_name": torch.cuda.get_device_name() if device == "cuda" else "cpu",
            "threads": torch.get_num_threads()}
    print(json.dumps({"info": info, "copy_ceiling_gbps": ceiling, "rows": rows}))


if __name__ == "__main__":
    main()
