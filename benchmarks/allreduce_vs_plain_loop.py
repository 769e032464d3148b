"""All-reduce figures of tasks/allreduce/remote/allreduce_bench.py against an independent plain
torch.distributed loop, side by side in one run.

The plain loop is the nccl-tests method written the shortest way: warm up, barrier, time N
back-to-back calls (synchronising the device at the end), divide by N. Ours times 7 repeats of
50 calls and keeps the median repeat of the slowest rank. The two alternate, one pair a round,
so drift on a noisy host hits both; the table gives medians over rounds and the median of the
per-round differences. A second plain loop a round is the control: how far the same plain
loop drifts from itself on this host (the noise floor any comparison here lives under).
gloo on CPU here; NCCL where GPUs are.
usage: python benchmarks/allreduce_vs_plain_loop.py [--ranks 2] [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLAIN = r"""
import json, os, sys, time, statistics, torch, torch.distributed as dist
cuda = torch.cuda.is_available()
dist.init_process_group("nccl" if cuda else "gloo")
if cuda: torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
rows = []
for size in map(int, sys.argv[1].split(",")):
    t = torch.ones(size // 2, dtype=torch.bfloat16, device="cuda" if cuda else "cpu")
    for _ in range(10): dist.all_reduce(t)
    dist.barrier()
    if cuda: torch.cuda.synchronize()
    s = time.perf_counter()
    for _ in range(300): dist.all_reduce(t)
    if cuda: torch.cuda.synchronize()
    rows.append({"bytes": size, "latency_us": (time.perf_counter() - s) / 300 * 1e6})
if int(os.environ["RANK"]) == 0: print(json.dumps(rows))
dist.destroy_process_group()
"""


def torchrun(ranks: int, port: int, *argv: str) -> str:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            str(ranks),
            "--master-port",
            str(port),
            *argv,
        ],
        capture_output=True,
        text=True,
        env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "NCCL_NVLS_ENABLE": "0"},
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith(("{", "["))]
    if not lines:
        raise SystemExit(out.stderr[-3000:])
    return lines[-1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--sizes", default="512,4096,16384,65536,262144,1048576,4194304")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    ours_runs, plain_runs, control_runs = [], [], []
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as handle:
        handle.write(PLAIN)
    for attempt in range(args.rounds):
        ours = json.loads(
            torchrun(
                args.ranks,
                29600 + attempt,
                str(ROOT / "tasks/allreduce/remote/allreduce_bench.py"),
                "--sizes",
                args.sizes,
                "--iterations",
                "50",
            )
        )
        ours_runs.append({r["bytes"]: r["latency_us"] for r in ours["rows"]})
        plain = json.loads(torchrun(args.ranks, 29700 + attempt, handle.name, args.sizes))
        plain_runs.append({r["bytes"]: r["latency_us"] for r in plain})
        control = json.loads(torchrun(args.ranks, 29800 + attempt, handle.name, args.sizes))
        control_runs.append({r["bytes"]: r["latency_us"] for r in control})
    backend = ours["backend"]
    print(f"{backend}, {args.ranks} ranks; {args.rounds} alternating rounds")
    print(
        f"{'bytes':>9} {'ours us':>9} {'plain loop us':>14} {'diff %':>7} {'diff % a round (min..max)':>27}"
        f" {'control: plain vs plain %':>26} {'ours busbw GB/s':>16} {'plain busbw':>12}"
    )
    factor = 2 * (args.ranks - 1) / args.ranks
    for size in map(int, args.sizes.split(",")):
        a = statistics.median(r[size] for r in ours_runs)
        b = statistics.median(r[size] for r in plain_runs)
        diffs = sorted((o[size] - p[size]) / p[size] * 100 for o, p in zip(ours_runs, plain_runs, strict=True))
        noise = sorted((c[size] - p[size]) / p[size] * 100 for c, p in zip(control_runs, plain_runs, strict=True))
        spread = f"{diffs[0]:.1f}..{diffs[-1]:.1f}"
        control = f"{statistics.median(noise):.1f} ({noise[0]:.1f}..{noise[-1]:.1f})"
        print(
            f"{size:>9} {a:9.1f} {b:14.1f} {statistics.median(diffs):7.1f} {spread:>27} {control:>26}"
            f" {size / a / 1e3 * factor:16.3f} {size / b / 1e3 * factor:12.3f}"
        )


if __name__ == "__main__":
    main()
