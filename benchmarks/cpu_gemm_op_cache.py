"""Why the CPU GEMM microbenchmark and the server's traced GEMM differ (issue 9's CPU check):
vLLM's `onednn_mm` at the embedded default's per-rank shapes (tiny Llama, TP=2), one thread
pinned to core 0 as one server rank has it, timed four ways:

- a call from Python (perf_counter) against the op's own profiler event (what a trace records);
- the op alone, then with a busy process on the same core (contention, as the other processes
  of the server share the cores);
- weights rotated over working sets from L2-sized to above L3 size;
- cold: 64 MB written between calls, so the weights come from memory.

usage: taskset -c 0 python benchmarks/cpu_gemm_op_cache.py   (needs vLLM's CPU build: ./dev installs it)
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tasks" / "gemm" / "remote"))
import vllm_gemm

SHAPES = [(256, 256, "qkv_proj / down_proj / lm_head"), (128, 256, "o_proj"), (256, 512, "gate_up_proj")]


def op_p50(fns, a, rounds, between=None) -> float:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(rounds):
            for fn in fns:
                if between is not None:
                    between()
                fn(a)
    return statistics.median(e.cpu_time_total for e in prof.events() if e.name == "_C::onednn_mm")


def call_us(fns, a, reps=2000) -> float:
    started = time.perf_counter()
    for i in range(reps):
        fns[i % len(fns)](a)
    return (time.perf_counter() - started) / reps * 1e6


def main() -> None:
    torch.set_num_threads(1)
    flush = torch.empty(64 << 20, dtype=torch.uint8)
    print(
        f"{'layer (K x N)':36} {'call us':>8} {'op us':>7} {'op, core shared':>15}"
        f" {'1 MiB':>6} {'4 MiB':>6} {'16 MiB':>7} {'cold':>6}"
    )
    for k, n, name in SHAPES:
        a = torch.randn(1, k, dtype=torch.bfloat16)
        sets = {}
        for mib in (1, 4, 16):
            copies = max(1, int(mib * 2**20 // (k * n * 2)))
            fns, _ = vllm_gemm.cpu_linear([torch.randn(n, k, dtype=torch.bfloat16) * 0.02 for _ in range(copies)])
            for fn in fns:
                fn(a)
            sets[mib] = (fns, op_p50(fns, a, max(2, 400 // copies)))
        fns = sets[1][0]
        call = statistics.median(call_us(fns, a) for _ in range(5))
        alone = op_p50(fns, a, 100)
        spinner = subprocess.Popen(["taskset", "-c", "0", sys.executable, "-c", "while True: pass"])
        try:
            time.sleep(0.2)
            shared = op_p50(fns, a, 100)
        finally:
            spinner.kill()
        cold = op_p50(fns[:4], a, 10, between=lambda: flush.add_(1))
        print(
            f"{name + f' ({k} x {n})':36} {call:8.1f} {alone:7.1f} {shared:15.1f}"
            f" {sets[1][1]:6.1f} {sets[4][1]:6.1f} {sets[16][1]:7.1f} {cold:6.1f}"
        )


if __name__ == "__main__":
    main()
