"""What a GEMM costs in the server's step beyond its own kernel (a GPU probe, not a test): the
Qwen3-MoE W4A16 experiment on the H100 realised +0.008 ms at c=1 against a +0.096 predicted, and its
trace showed why: the gap before each Machete kernel was 4.11 µs (99 a step: 0.41 ms), against
0.43-0.50 µs before every other kernel (benchmarks/results/h100_qwen3moe_run4_2026-12-06.md). The
GEMM micro times a GEMM back to back with itself in one CUDA graph, where no such gap shows. This
times each GEMM three ways in one CUDA graph of rotated copies, at M=1:
- alone: the GEMM back to back (as the campaign's micro);
- after a neighbour: vLLM's rms_norm on the hidden vector ahead of every call, less the neighbour alone
  (the kernel before the QKV projection in the server is an RMSNorm); then the same after a Triton kernel
  torch.compile makes of the residual add + RMSNorm, as the server's trace has it
  (`triton_red_fused_fused_add_rms_norm_machete_mm_1` ahead of a memset and each Machete GEMM);
- and each pass's profiled kernel µs a call, so wall less kernels is the gap in the graph.

usage (on the GPU host, vLLM on the path): python benchmarks/neighbour_gap_probe.py [qwen3moe|llama8b]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tasks" / "gemm" / "remote"))

from bench_timing import captured, graph_kernel_us, median_seconds  # noqa: E402
from vllm_gemm import machete  # noqa: E402

SHAPES = {  # dense GEMMs per rank at TP 1: name -> (K, N); and the hidden size the RMSNorm reads
    "qwen3moe": {"hidden": 2048, "gemms": {"qkv_proj": (2048, 5120), "o_proj": (4096, 2048)}},
    "llama8b": {"hidden": 4096, "gemms": {"qkv_proj": (4096, 6144), "o_proj": (4096, 4096)}},
}
COPIES = 32


def wall_and_kernels_us(calls: list) -> tuple[float, float]:
    """µs a copy of the graph (median of 20 replays) and the sum of its kernels' profiled µs a copy: a
    copy is one GEMM, or one neighbour and its GEMM (COPIES of either in the graph), so the pair's
    figures less the neighbour's alone are the GEMM's in that place."""
    graph = captured(calls)
    wall = median_seconds(graph.replay, "cuda", 20, 1) / COPIES * 1e6
    kernels = graph_kernel_us(graph.replay, COPIES)
    return wall, sum(v for v in kernels.values() if isinstance(v, float))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shape", nargs="?", default="qwen3moe", choices=sorted(SHAPES))
    args = parser.parse_args()
    import vllm._custom_ops  # noqa: F401 - registers torch.ops._C

    shape = SHAPES[args.shape]
    hidden = shape["hidden"]
    x = torch.randn(1, hidden, dtype=torch.bfloat16, device="cuda")
    norm_w = torch.ones(hidden, dtype=torch.bfloat16, device="cuda")
    norm_out = torch.empty_like(x)

    def neighbour():
        torch.ops._C.rms_norm(norm_out, x, norm_w, 1e-6)

    residual = torch.randn_like(x)

    def add_rms_norm(hidden_states, res, weight):
        summed = hidden_states.float() + res.float()
        scaled = summed * torch.rsqrt(summed.pow(2).mean(-1, keepdim=True) + 1e-6)
        return scaled.to(torch.bfloat16) * weight

    compiled = torch.compile(add_rms_norm, dynamic=False)

    def inductor_neighbour():  # as the server's torch.compile'd residual add + RMSNorm (one Triton kernel)
        compiled(x, residual, norm_w)

    for label, near in (("vLLM rms_norm", neighbour), ("Inductor's fused add + RMSNorm", inductor_neighbour)):
        near()
        torch.cuda.synchronize()
        n_wall, n_kern = wall_and_kernels_us([near] * COPIES)
        print(
            f"# {args.shape}: the neighbour ({label}, hidden {hidden}) alone: {n_wall:.2f} µs wall,"
            f" {n_kern:.2f} µs kernels a call"
        )
        print(
            "| shape | GEMM | format | alone wall µs | alone kernels µs | after the neighbour: wall less its wall "
            "| kernels less its | gap in the graph, alone | after the neighbour (less its own gap alone) |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for name, (k, n) in shape["gemms"].items():
            weights = [torch.randn(n, k, dtype=torch.bfloat16, device="cuda") for _ in range(COPIES)]
            a = torch.randn(1, k, dtype=torch.bfloat16, device="cuda")
            formats = {"bf16": [lambda w=w, a=a: torch.nn.functional.linear(a, w) for w in weights]}
            fns, _, why = machete(weights, 128)
            if fns is None:
                print(f"| {args.shape} | {name} | w4a16 | {why} | | | | | |")
            else:
                formats["w4a16"] = [lambda fn=fn, a=a: fn(a) for fn in fns]
            for fmt, calls in formats.items():
                wall, kern = wall_and_kernels_us(calls)
                pair_wall, pair_kern = wall_and_kernels_us([s for fn in calls for s in (near, fn)])
                print(
                    f"| {args.shape} | {name} | {fmt} | {wall:.2f} | {kern:.2f} | {pair_wall - n_wall:.2f} "
                    f"| {pair_kern - n_kern:.2f} | {wall - kern:.2f} | {pair_wall - pair_kern - (n_wall - n_kern):.2f} |"
                )


if __name__ == "__main__":
    main()
