"""The FP8 KV micro's kernels beside the server's, kernel by kernel: what the micro profiled (the warm
rotation, and the cold pass with the L2 evicted ahead of every layer, where it ran) at one sequence,
against the same kernels in the base's and the FP8 variant's traces (rank 0, decode steps: kernels
launched one block a token, the FlashAttention decode and its combine).

The prediction reads the micro's change (FP8 minus the model's KV dtype) a layer; the traces hold
what the server's kernels did. A micro that reproduces the server's kernels gives their figures
here, each dtype; one that does not says by how much and in which kernel.

usage: python benchmarks/kv_micro_vs_trace.py TODO_JSON[.gz] BASE_TRACE FP8_TRACE [--m 1]
  (the traces as benchmarks/gpu_experiments.sh packs them: base.rank0.trace.json.gz,
   fp8_kv_cache.rank0.trace.json.gz)
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tasks.gemm.kv_layer_kernels import KERNELS, micro_us, named
from tasks.gemm.results import KvRow


def _load(path: Path):
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def trace_launches(path: Path) -> dict[str, tuple[float, str]]:
    """Each part's median µs a call over the trace's decode launches, and the kernel's whole name there:
    the write at one token (grid 1), the decode attention and its combine (the launch shape seen most;
    prefill's are few)."""
    durations: dict[str, dict[str, list[float]]] = {part: {} for part in KERNELS}
    names: dict[str, dict[str, Counter]] = {part: {} for part in KERNELS}
    for event in _load(path)["traceEvents"]:
        if event.get("cat") != "kernel":
            continue
        for part in KERNELS:
            if named(part, event["name"]):
                args = event.get("args", {})
                grid = f"{args.get('grid')} {args.get('block')}"
                durations[part].setdefault(grid, []).append(event["dur"])
                names[part].setdefault(grid, Counter())[event["name"]] += 1
    out = {}
    for part, by_grid in durations.items():
        one_token = [launch for launch in by_grid if launch.startswith("[1, 1, 1] ")]
        if part == "the cache write" and one_token:
            launch = one_token[0]
        elif by_grid:
            launch = max(by_grid, key=lambda grid: len(by_grid[grid]))
        else:
            continue
        out[part] = (statistics.median(by_grid[launch]), names[part][launch].most_common(1)[0][0])
    return out


def template_difference(micro: str, traced: str) -> str:
    """Whether the micro profiled the kernel the server ran: the same whole name (its template
    arguments), the first argument where they part, or unknown where the micro's name was cut (its
    profiles before 2026-12-05 kept 120 characters)."""
    if micro == traced:
        return "same"
    if len(micro) <= 120 and traced.startswith(micro):
        return "unknown (the micro's name cut at 120 characters)"
    micro_args, traced_args = micro.split(", "), traced.split(", ")
    index = next((i for i, (a, b) in enumerate(zip(micro_args, traced_args, strict=False)) if a != b), None)
    if index is None:  # one name runs on past the other's end
        return f"differs: one name is the other's start ({len(micro)} against {len(traced)} characters)"
    return f"differs at the name's piece {index} (split at commas): micro `{micro_args[index][:60]}`, trace `{traced_args[index][:60]}`"


def micro_by_pass(todo: Path, m: int) -> dict[tuple[str, str], tuple[dict[str, float], dict[str, str]]]:
    """(dtype, pass) -> (kernel -> µs a call, kernel -> its whole name as the profile keeps it), from the
    KV micro's rows at ``m`` sequences and their shortest context (the capture's contexts are short),
    as the findings read them."""
    todos = {t["id"]: t for t in _load(todo)["todos"]}
    raw = todos["gemm_bench"]["result"].get("kv_rows", [])
    rows = [KvRow.model_validate(r) for r in raw if r.get("m") == m and not r.get("skipped")]
    if not rows:
        raise SystemExit(f"{todo}: the KV micro has no timed row at m={m}")
    context = min(row.context for row in rows)
    out = {}
    for row in (r for r in rows if r.context == context):
        for label, cold in (("warm", False), ("cold", True)):
            kernels = row.cold_kernels_us if cold else row.kernels_us
            if kernels:
                names = {part: name for name in kernels for part in KERNELS if named(part, name)}
                out[(row.kv_dtype, label)] = (micro_us(row, cold), names)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("todo", type=Path)
    parser.add_argument("base_trace", type=Path)
    parser.add_argument("fp8_trace", type=Path)
    parser.add_argument("--m", type=int, default=1)
    args = parser.parse_args()
    launches = {"auto": trace_launches(args.base_trace), "fp8": trace_launches(args.fp8_trace)}
    traced = {dtype: {part: us for part, (us, _) in by_part.items()} for dtype, by_part in launches.items()}
    micro = micro_by_pass(args.todo, args.m)
    passes = sorted({label for _, label in micro}, reverse=True)
    header = ["kernel", "trace bf16", "trace FP8", "trace change"]
    for label in passes:
        header += [f"micro {label} bf16", f"micro {label} FP8", f"micro {label} change"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))

    def cells(auto: float | None, fp8: float | None) -> list[str]:
        if auto is None or fp8 is None:
            return ["-", "-", "-"]
        return [f"{auto:.2f}", f"{fp8:.2f}", f"{fp8 - auto:+.2f}"]

    totals = {key: 0.0 for key in ["trace", *passes]}
    for part in KERNELS:
        row = [part, *cells(traced["auto"].get(part), traced["fp8"].get(part))]
        totals["trace"] += traced["fp8"].get(part, 0.0) - traced["auto"].get(part, 0.0)
        for label in passes:
            auto, fp8 = (micro.get((dtype, label), ({}, {}))[0].get(part) for dtype in ("auto", "fp8"))
            row += cells(auto, fp8)
            totals[label] += (fp8 or 0.0) - (auto or 0.0)
        print("| " + " | ".join(row) + " |")
    print("FP8 change a layer, µs: " + ", ".join(f"{key} {value:+.2f}" for key, value in totals.items()))
    for (dtype, label), (_, names) in sorted(micro.items()):
        for part, name in names.items():
            if part in launches[dtype]:
                verdict = template_difference(name, launches[dtype][part][1])
                print(
                    f"the micro's {label} {'bf16' if dtype == 'auto' else 'FP8'} {part} against the trace's: {verdict}"
                )


if __name__ == "__main__":
    main()
