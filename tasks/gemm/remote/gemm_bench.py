"""GEMM microbenchmarks at given shapes on the host's accelerator: the kernels vLLM's server runs
where vLLM imports (vllm_gemm.py, fused_moe_bench.py), else torch's, named in each row.

usage: gemm_bench.py SHAPES_JSON [--repeats N] [--group-size G] [--fp8-block B]
                     [--w4a16-kernel auto|machete|marlin] [--threads T] [--compare-do-bench]
SHAPES_JSON: a list of {"name", "m", "k", "n", "dtype": "bf16"|"w4a16"|"fp8"}; a row with
"experts" and "top_k" is one MoE layer's routed experts (K = hidden, N = expert intermediate
size per rank), timed as vLLM's fused MoE.

W4A16: vLLM's Machete (Hopper) or Marlin, as the server chose; else torch's tinygemm. FP8
(e4m3): vLLM's cutlass_scaled_mm, else torch._scaled_mm, with the finest scaling that works:
DeepSeek-V3's recipe (weights in B x B blocks, activations in 1 x B groups) where B is given,
else per-channel/per-token scales, else one scale a tensor. Activations are quantized before
timing (vLLM quantizes them in a separate small kernel), so the figure is the GEMM's own.
bf16 on CPU: vLLM's onednn_mm / weight_packed_linear; on CUDA: torch's linear (cuBLAS), which
is what vLLM's unquantized linear calls.

Each kernel is checked against a bf16 reference before it is timed (bench_timing.py says how).
A device-to-device copy of a large buffer, measured in the same run, is the bandwidth ceiling.
Prints one JSON document.
"""

import argparse
import json

import fused_moe_bench
import torch
import vllm_gemm

try:
    from host_progress import Reporter  # shipped beside this script (tasks/host_progress.py)
except ImportError:  # run by hand without it: no progress lines
    Reporter = None
from bench_timing import (
    copy_ceiling_gbps,
    profiled_op_us,
    relative_error,
    shape_outliers,
    time_rotations,
)

CACHE_FLUSH_BYTES = 512 << 20  # working set per rotation: well above an H200's 50 MB L2


def int4_pack(weight_nk, group_size, device):
    """Quantize a bf16 N x K weight to int4 (asymmetric, per group) for torch's int4 kernels.

    Returns (packed, scales_and_zeros, dequantized N x K bf16) so the kernel can be checked
    against a bf16 matmul with exactly the weights it multiplies.
    """
    n, k = weight_nk.shape
    w = weight_nk.float().reshape(n, k // group_size, group_size)
    w_min, w_max = w.amin(dim=-1, keepdim=True), w.amax(dim=-1, keepdim=True)
    scales = (w_max - w_min).clamp(min=1e-6) / 15
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
    ``only_mode``, once chosen for a shape), each with vLLM's kernel before torch's. Returns
    (matmul, dequantized weight, dequantized activation, kernel, mode, why finer scalings or vLLM's kernel failed)."""
    m, k = activation_mk.shape
    n = weight_nk.shape[0]
    modes = []
    if block and device == "cuda" and k % block == 0 and n % block == 0:
        modes.append(("blockwise", (1, block), (block, block)))
    modes += [("rowwise", (1, k), (1, k)), ("tensorwise", (m, k), (n, k))]
    if only_mode:
        modes = [mode for mode in modes if mode[0] == only_mode]
    kernels = [
        (
            "torch._scaled_mm",
            lambda a_q, w_q_t, a_s, w_s: torch._scaled_mm(
                a_q, w_q_t, scale_a=a_s, scale_b=w_s, out_dtype=torch.bfloat16
            ),
        )
    ]
    vllm_fp8 = vllm_gemm.cutlass_scaled_mm() if device == "cuda" else None
    if vllm_fp8 is not None:
        kernels.insert(0, ("vLLM cutlass_scaled_mm", vllm_fp8))
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

        # vLLM's own FP8 GEMM first (what the server runs), then torch's.
        for kernel, fn in kernels:
            # torch's blockwise only where the scale buffers' rows are whole 16-byte units (K/B
            # and M multiples of 4): on an H200 (torch 2.11, cu130) other shapes were accepted and
            # then returned garbage (K/B = 2, 18) or hit an illegal memory access that poisons
            # the whole CUDA context, which no fallback survives.
            if mode == "blockwise" and kernel == "torch._scaled_mm" and (k % (4 * block) or m % 4):
                errors.append(f"{kernel} {mode}: not tried at M={m}, K/B={k // block}")
                continue

            def matmul(_a, fn=fn, a_q=a_q, w_q=w_q, a_scale=a_scale, w_scale=w_scale):
                return fn(a_q, w_q.t(), a_scale, w_scale)

            try:
                out = matmul(None).float()
            except (RuntimeError, NotImplementedError, AssertionError) as err:
                errors.append(f"{kernel} {mode}: {str(err).splitlines()[0][:120]}")
                continue
            # A scaling the kernel accepts can still compute garbage (see above): check, fall back.
            error = relative_error(out, a_deq @ w_deq.t())
            if error > 0.05:
                errors.append(f"{kernel} {mode}: wrong result (relative error {error:.3g})")
                continue
            return matmul, w_deq.to(torch.bfloat16), a_deq, f"{kernel} fp8 e4m3, {mode} scales", mode, errors
    raise RuntimeError("; ".join(errors))


def bench_shape(shape, device, repeats, group_size, fp8_block, do_bench, w4a16_kernel):
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
        fns, reference_weights, kernel = (
            vllm_gemm.w4a16(weights, group_size, w4a16_kernel) if device == "cuda" else (None, None, None)
        )
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
            packed = [first] + [
                fp8_pack(w, a, fp8_block, device, only_mode=first[4])
                for w, a in zip(weights[1:], activations[1:], strict=True)
            ]
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
        fns, kernel = vllm_gemm.cpu_linear(weights) if device == "cpu" else (None, None)
        if fns is None:
            fns = [(lambda a, w=w: torch.nn.functional.linear(a, w)) for w in weights]
            kernel = (
                "torch.nn.functional.linear (cuBLAS)"
                if device == "cuda"
                else f"torch.nn.functional.linear (oneDNN/MKL; fallback: {kernel})"
            )
        reference_weights = weights
        row["kernel"] = kernel
    error = relative_error(fns[0](activations[0]), activations[0].float() @ reference_weights[0].float().t())
    row["relative_error_vs_bf16_reference"] = error
    if error > 0.05:
        return {**row, "skipped": f"result disagrees with the bf16 reference (relative error {error:.3g})"}
    calls = [(lambda fn=fn, a=a: fn(a)) for fn, a in zip(fns, activations, strict=True)]
    seconds, timing = time_rotations(calls, device, repeats, do_bench)
    if device == "cpu":
        timing["op"], timing["op_us"], timing["op_cold_us"] = profiled_op_us(calls)
    flops = 2 * m * k * n
    moved = m * k * (1 if dtype == "fp8" else 2) + weight_bytes_per_copy + m * n * 2
    if dtype == "w4a16":
        moved += (k // group_size) * n * 2 * 2
    row.update(timing, us=seconds * 1e6, tflops=flops / seconds / 1e12, gbps=moved / seconds / 1e9, bytes_moved=moved)
    return row


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("shapes")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--group-size", type=int, default=128)
    parser.add_argument("--fp8-block", type=int, default=128, help="0: per-channel scales")
    parser.add_argument("--compare-do-bench", action="store_true")
    parser.add_argument("--device", default="auto")
    parser.add_argument(
        "--w4a16-kernel",
        choices=sorted(vllm_gemm.W4A16_BUILDERS),
        default="auto",
        help="the W4A16 kernel the server's log named; auto: vLLM's own preference",
    )
    parser.add_argument(
        "--threads", type=int, default=0, help="CPU threads, as one server rank has them (0: torch's default)"
    )
    args = parser.parse_args()
    default_threads = torch.get_num_threads()
    if args.threads:
        torch.set_num_threads(args.threads)
    with open(args.shapes) as handle:
        shapes = json.load(handle)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    torch.manual_seed(0)
    ceiling = copy_ceiling_gbps(device, args.repeats)

    def bench(shape):
        # a row timed as a rank at another TP would run it (lower_tp's rows): that rank's cores
        torch.set_num_threads(shape.get("threads") or args.threads or default_threads)
        with torch.no_grad():
            if shape.get("experts"):
                return fused_moe_bench.bench_fused_moe(
                    shape, device, args.repeats, args.group_size, args.compare_do_bench
                )
            return bench_shape(
                shape, device, args.repeats, args.group_size, args.fp8_block, args.compare_do_bench, args.w4a16_kernel
            )

    def key_of(shape):
        return (
            shape["m"],
            shape["k"],
            shape["n"],
            shape["dtype"],
            shape.get("experts"),
            shape.get("top_k"),
            shape.get("threads"),
        )

    seen = {}
    report = Reporter() if Reporter is not None else None
    distinct = len({key_of(shape) for shape in shapes})
    for shape in shapes:
        if key_of(shape) not in seen:
            seen[key_of(shape)] = bench(shape)
            if report is not None:
                us = seen[key_of(shape)].get("us")
                report(
                    "shapes timed",
                    len(seen),
                    distinct,
                    "shapes",
                    f"{shape['name']} M={shape['m']}: {us:.1f} µs" if us is not None else shape["name"],
                )
    # A time implausible beside the same GEMM at the neighbouring M is measured once more; the
    # second figure is kept, and flagged if it is still out of line.
    for key in shape_outliers({k: r.get("us") for k, r in seen.items()}):
        first = seen[key]
        seen[key] = {**bench(next(s for s in shapes if key_of(s) == key)), "remeasured_from_us": first.get("us")}
    for key in shape_outliers({k: r.get("us") for k, r in seen.items()}):
        seen[key]["flag"] = (
            "out of line with the same GEMM at the neighbouring batch sizes, measured twice"
            f" ({seen[key].get('remeasured_from_us', 0):.1f} then {seen[key]['us']:.1f} µs)"
            if "remeasured_from_us" in seen[key]
            else "out of line with the same GEMM at the neighbouring batch sizes"
        )
    rows = []
    for shape in shapes:
        row = {**seen[key_of(shape)], "name": shape["name"]}
        if shape.get("threads"):
            row["threads"] = shape["threads"]
        if "gbps" in row:
            row["pct_of_copy_ceiling"] = row["gbps"] / ceiling * 100
        rows.append(row)
    info = {
        "device": device,
        "torch": torch.__version__,
        "device_name": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "threads": args.threads or default_threads,
    }
    print(json.dumps({"info": info, "copy_ceiling_gbps": ceiling, "rows": rows}))


if __name__ == "__main__":
    main()
