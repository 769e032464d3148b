"""Direct count over public real traces, beside `orchestrate analyze`: per category share of a
step's device time, and `other`. Plain json and a hand-made table of kernel families (read off
the names, not the project's rules); no project code but the analyser run as a command.

    python benchmarks/public_traces_direct_count.py TRACE...

The traces used (fetch them with the `fetch` tool or git): TraceLens (github.com/AMD-AGI/TraceLens)
tests/traces/b200/eager_trace.json.gz, tests/traces/inference/{sglang_decode,sglang_prefilldecode,
vllm_decode_full,vllm_prefilldecode_piecewise}/*.json.gz, tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz,
tests/traces/mi210/gpu_only_trace/gpu_only_trace.json.gz; deepseek-ai/profile-data train.json.
Window: the kernels whose start is inside the GPU-timeline step annotation (vLLM's execute_..., SGLang's
step[...]); with CPU-only ProfilerStep ranges, the kernels whose launch (same correlation id) is inside;
with neither, the whole trace.
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

# Substring (lower case) -> category, first match wins: written by reading the traces' names.
FAMILIES = [
    ("triton_poi", "norm_elementwise"),
    ("triton_red", "norm_elementwise"),
    ("dpsk::ep::", "communication"),
    ("deep_ep", "communication"),
    ("nccl", "communication"),
    ("multimem_all_reduce", "communication"),
    ("rms_norm", "norm_elementwise"),
    ("rmsnorm", "norm_elementwise"),
    ("layer_norm", "norm_elementwise"),
    ("moe::dev::routing", "moe_routing"),
    ("_combined_routing", "moe_routing"),
    ("_sum_bitmatrix", "moe_routing"),
    ("_topk_forward", "moe_routing"),
    ("topk_sum_and_topk_idx", "moe_routing"),
    ("bmm_", "moe"),
    ("_matmul_ogs_", "moe"),
    ("_finalize_matmul_scatter", "moe"),
    ("moe::dev::finalize", "moe"),
    ("m_grouped_", "moe"),
    ("expand_to_fused", "moe"),
    ("reduce_fused", "moe"),
    ("get_fused_mapping", "moe"),
    ("clean_and_count_expert", "moe"),
    ("quantize_with_block_size", "quantization"),
    ("scaled_fp8_quant", "quantization"),
    ("per_token_cast", "quantization"),
    ("per_channel_cast", "quantization"),
    ("cast_back", "quantization"),
    ("flash", "attention"),
    ("fmha", "attention"),
    ("paged_attention", "attention"),
    ("unified_attention", "attention"),
    ("reshape_and_cache", "attention"),
    ("store_kvcache", "attention"),
    ("kv_indices", "step_prep"),
    ("page_indices", "step_prep"),
    ("position_kernel", "step_prep"),
    ("future_token_ids", "step_prep"),
    ("nvjet", "gemm"),
    ("xmma_gemm", "gemm"),
    ("cijk_", "gemm"),
    ("igemm_", "gemm"),
    ("grouped_gemm", "gemm"),
    ("sgemm", "gemm"),
    ("argmax", "sampling"),
    ("gathertopk", "sampling"),
    ("memcpy", "memcpy"),
    ("memset", "memcpy"),
    ("elementwise", "norm_elementwise"),
    ("rotary", "norm_elementwise"),
    ("act_and_mul", "norm_elementwise"),
    ("swiglu", "norm_elementwise"),
    ("reduce_kernel", "norm_elementwise"),
    ("transpose", "norm_elementwise"),
    ("catarray", "norm_elementwise"),
    ("gather", "norm_elementwise"),
    ("indexselect", "norm_elementwise"),
    ("batch_norm", "norm_elementwise"),
    ("subtensorop", "norm_elementwise"),
    ("pool_", "norm_elementwise"),
    ("reduce_segments", "norm_elementwise"),
]
STEP = re.compile(r"execute_(\d+_)?context_|^step\[")


def category(name: str) -> str:
    low = name.lower()
    return next((cat for key, cat in FAMILIES if key in low), "other")


def direct(path: Path) -> dict[str, float]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    gpu_steps = [e for e in events if e.get("cat") == "gpu_user_annotation" and STEP.search(e["name"])]
    cpu_steps = [e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    if gpu_steps:
        chosen = [k for k in kernels if any(s["ts"] <= k["ts"] <= s["ts"] + s["dur"] for s in gpu_steps)]
    elif cpu_steps and not any(e.get("cat") == "gpu_user_annotation" for e in events):
        launch = {
            e["args"]["correlation"]: e["ts"]
            for e in events
            if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
        }
        chosen = [
            k
            for k in kernels
            if any(
                s["ts"] <= launch.get(k.get("args", {}).get("correlation"), k["ts"]) <= s["ts"] + s["dur"]
                for s in cpu_steps
            )
        ]
    else:
        chosen = kernels
    by = Counter()
    for k in chosen:
        by[category(k["name"])] += k["dur"]
    total = sum(by.values()) or 1.0
    return {c: us / total * 100 for c, us in by.items()}


def analysed(path: Path) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-m", "orchestrate", "analyze", str(path), "--json"],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    rank = json.loads(out.stdout)["ranks"][0]
    return {c: v["share_pct"] for c, v in rank["categories"].items()}


def main(paths: list[str]) -> int:
    worst = 0.0
    for name in paths:
        path = Path(name)
        mine, ours = direct(path), analysed(path)
        print(f"\n{path.name}")
        print(f"  {'category':18s} {'direct %':>9s} {'analyser %':>11s} {'diff':>6s}")
        for cat in sorted(set(mine) | {c for c, v in ours.items() if v}, key=lambda c: -mine.get(c, 0)):
            diff = ours.get(cat, 0.0) - mine.get(cat, 0.0)
            worst = max(worst, abs(diff))
            print(f"  {cat:18s} {mine.get(cat, 0.0):9.1f} {ours.get(cat, 0.0):11.1f} {diff:+6.1f}")
    print(f"\nlargest difference: {worst:.1f} points (goal: within 1)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
