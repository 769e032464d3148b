"""Trace analysis speed and memory against HolisticTraceAnalysis 0.5.0, side by side.

Builds 8 rank traces of ~134 MB uncompressed JSON each (real H200 Kineto events from
tests/data/gpu_decode_trace.json.gz, replicated with shifted timestamps and ids, in Kineto's
layout), then times in separate processes, each measured the same way (wall time; peak of the
summed RSS of the process and its children, sampled every 20 ms):
  - ours:  tasks.analysis.breakdown.analyze_ranks(..., workers=2)
  - HTA:   TraceAnalysis(trace_dir=...) + get_gpu_kernel_breakdown()
usage: python benchmarks/trace_analysis_vs_hta.py [--dir /tmp/orchestrate-hta-bench] [--mb 134] [--ranks 8]
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "tests" / "data" / "gpu_decode_trace.json.gz"


def kineto_event(event: dict) -> str:
    return "  {\n    " + json.dumps(event)[1:-1] + "\n  }"


def build(folder: Path, ranks: int, target_mb: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"rank-{rank}.json" for rank in range(ranks)]
    if all(p.exists() and p.stat().st_size > target_mb * 0.9e6 for p in paths):
        return paths
    document = json.loads(gzip.decompress(SOURCE.read_bytes()))
    events = [e for e in document["traceEvents"] if e.get("ph") in ("X", "f", "s")]
    meta = [e for e in document["traceEvents"] if e.get("ph") not in ("X", "f", "s")]
    span = max(e["ts"] + e.get("dur", 0) for e in events) - min(e["ts"] for e in events) + 1000
    ids = [e["args"].get(key, 0) for e in events for key in ("correlation", "External id") if "args" in e]
    id_span = max(i for i in ids if isinstance(i, int)) + 1
    one_copy = sum(len(kineto_event(e)) + 2 for e in events)
    copies = max(1, int(target_mb * 1e6 // one_copy))
    for rank, path in enumerate(paths):
        header = {k: v for k, v in document.items() if k != "traceEvents"}
        header["distributedInfo"] = {**header.get("distributedInfo", {}), "rank": rank, "world_size": ranks}
        with open(path, "w") as out:
            out.write("{\n" + ",\n".join(f'  "{k}": {json.dumps(v)}' for k, v in header.items()
                                         if k not in ("traceName",)) + ',\n  "traceEvents": [\n')
            first = True
            for copy in range(copies):
                for event in events:
                    shifted = dict(event, ts=event["ts"] + copy * span)
                    if "args" in event:
                        args = dict(event["args"])
                        for key in ("correlation", "External id"):
                            if isinstance(args.get(key), int):
                                args[key] += copy * id_span
                        shifted["args"] = args
                    if "id" in event and isinstance(event["id"], int):
                        shifted["id"] = event["id"] + copy * id_span
                    out.write(("" if first else ",\n") + kineto_event(shifted))
                    first = False
            for event in meta:
                out.write(",\n" + kineto_event(event))
            out.write('\n  ],\n  "traceName": "' + str(path) + '"\n}\n')
    return paths


def measure(code: str) -> tuple[float, float, str]:
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    root = psutil.Process(process.pid)
    peak = 0
    while process.poll() is None:
        try:
            total = root.memory_info().rss + sum(c.memory_info().rss for c in root.children(recursive=True))
            peak = max(peak, total)
        except psutil.Error:
            pass
        time.sleep(0.02)
    wall = time.perf_counter() - started
    output = process.stdout.read()
    if process.returncode:
        raise SystemExit(f"failed:\n{output[-3000:]}")
    return wall, peak / 1e9, output


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", type=Path, default=Path("/tmp/orchestrate-hta-bench"))
    parser.add_argument("--mb", type=int, default=134)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    paths = build(args.dir, args.ranks, args.mb)
    total_gb = sum(p.stat().st_size for p in paths) / 1e9
    print(f"{len(paths)} ranks, {total_gb:.2f} GB uncompressed JSON in {args.dir}")
    ours_code = (
        "import json; from pathlib import Path; from tasks.analysis.breakdown import analyze_ranks;"
        f" r = analyze_ranks({{i: Path(p) for i, p in enumerate({[str(p) for p in paths]!r})}}, workers=2);"
        " print(json.dumps({'steps': r['ranks'][0]['decode_steps'], 'gemm_ms': r['ranks'][0]['categories']['gemm']['ms_per_step']}))")
    hta_code = (
        "import logging; logging.disable(logging.CRITICAL);"
        "from hta.trace_analysis import TraceAnalysis;"
        f" a = TraceAnalysis(trace_dir={str(args.dir)!r}); k, d = a.get_gpu_kernel_breakdown(visualize=False);"
        " print(k.to_string()[:400])")
    rows = {"ours": [], "HTA 0.5.0": []}
    for _ in range(args.repeats):
        rows["ours"].append(measure(ours_code))
        rows["HTA 0.5.0"].append(measure(hta_code))
    print(f"{'tool':10} {'wall s (median)':>16} {'peak RSS GB (median)':>21}  runs")
    import statistics
    medians = {}
    for tool, runs in rows.items():
        wall = statistics.median(r[0] for r in runs)
        peak = statistics.median(r[1] for r in runs)
        medians[tool] = (wall, peak)
        print(f"{tool:10} {wall:16.2f} {peak:21.3f}  " + ", ".join(f"{r[0]:.1f}s/{r[1]:.2f}GB" for r in runs))
    ours, hta = medians["ours"], medians["HTA 0.5.0"]
    print(f"speed-up {hta[0] / ours[0]:.1f}x (target >= 15x); memory {ours[1] / hta[1] * 100:.0f}% of HTA's (target <= 50%)")
    print("ours:", rows["ours"][0][2].strip().splitlines()[-1])


if __name__ == "__main__":
    main()
