"""What a speculative decode step costs on the host, beside the base's (a diagnostic, not an input):
the campaign's `spec_gpu_step_extra_ms` is assumed 0 until an experiment measures it, and the
findings show the variant's steps turned host-bound (the device's idle between kernels grows by
about the step cost). This reads the two rank-0 traces the campaign keeps and prints, for the decode
steps (vLLM's `execute_context_0(0)_generation_N(...)` host annotations):

- the steps by how many CUDA graphs each launched: one (the full decode graph) or several
  (piecewise: attention runs eagerly between the graph's pieces), with the host annotation's mean
  duration for each (profiled: the profiler's own cost is in both sides);
- each step's span (to the next step's annotation), its host annotation and the device's busy time in
  it, as medians: a span near host + device says the step's host work and device work ran one after
  the other (no overlap), a span near the larger of the two that they overlapped;
- the host's top-level ops a full-graph step, base against variant, those that grew most.

usage: python benchmarks/spec_step_host.py BASE_TRACE VARIANT_TRACE
"""

from __future__ import annotations

import gzip
import re
import sys
from bisect import bisect_left
from collections import Counter, defaultdict
from pathlib import Path
from statistics import mean, median

import orjson

DECODE = re.compile(r"execute_context_0\(0\)_generation_[1-9]\d*\(\d+\)")  # generation_0: an empty step
HOST = ("cpu_op", "cuda_runtime", "python_function")
STEP = "execute_context_"
GAP_US = 20_000


def decode_steps(trace: Path) -> list[dict]:
    """Each decode step: its host duration, graph launches and top-level host ops (µs)."""
    raw = trace.read_bytes()
    document = orjson.loads(gzip.decompress(raw) if trace.suffix == ".gz" else raw)
    spans = [e for e in document.get("traceEvents", []) if e.get("ph") == "X"]
    marks = [e for e in spans if e.get("cat") == "user_annotation" and DECODE.fullmatch(e.get("name", ""))]
    if not marks:
        sys.exit(f"{trace}: no decode step annotations (execute_context_0(0)_generation_N(...))")
    # a step's span: from its annotation to the next step's (any execute_context, prefill too);
    # a longer gap than GAP_US is the wait between requests, not a step
    every = sorted(e["ts"] for e in spans if e.get("cat") == "user_annotation" and e.get("name", "").startswith(STEP))
    kernels = sorted((e["ts"], e["dur"]) for e in spans if e.get("cat") == "kernel")
    kernel_starts = [ts for ts, _ in kernels]
    thread = Counter(m["tid"] for m in marks).most_common(1)[0][0]
    host = sorted(
        (e for e in spans if e.get("tid") == thread and e.get("cat") in HOST), key=lambda e: (e["ts"], -e["dur"])
    )
    starts = [e["ts"] for e in host]
    steps = []
    for mark in marks:  # each step's host events by bisection: one pass over the sorted list, not one a step
        begin, end = mark["ts"], mark["ts"] + mark["dur"]
        inside = host[bisect_left(starts, begin) : bisect_left(starts, end)]
        top, reach = defaultdict(float), -1.0
        for event in inside:  # outermost only: host ops nest
            if event["ts"] >= reach:
                top[event["name"][:90]] += event["dur"]
                reach = event["ts"] + event["dur"]
        launches = sum(1 for e in inside if e["name"] == "cudaGraphLaunch")
        after = bisect_left(every, begin + 1e-3)
        span = every[after] - begin if after < len(every) and every[after] - begin <= GAP_US else None
        device = None
        if span is not None:  # the kernels that start inside the span, their time
            device = sum(
                d for _, d in kernels[bisect_left(kernel_starts, begin) : bisect_left(kernel_starts, begin + span)]
            )
        steps.append({"host_us": mark["dur"], "launches": launches, "top": top, "span_us": span, "device_us": device})
    return steps


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__.split("usage: ")[1].strip())
    sides = {label: decode_steps(Path(path)) for label, path in zip(("base", "variant"), sys.argv[1:], strict=True)}
    print("| trace | decode steps | graph launches a step | steps | host µs a step (profiled) |")
    print("|---|---|---|---|---|")
    for label, steps in sides.items():
        for launches, count in sorted(Counter(s["launches"] for s in steps).items()):
            host = mean(s["host_us"] for s in steps if s["launches"] == launches)
            print(f"| {label} | {len(steps)} | {launches} | {count} | {host:.0f} |")
    # Overlapped (async scheduling): a step's span is about max(host, device). Serial: host + device.
    print("\n| trace | steps timed | span µs a step (median) | host µs | device busy µs | host + device µs |")
    print("|---|---|---|---|---|---|")
    for label, steps in sides.items():
        timed = [s for s in steps if s["span_us"] is not None]
        if timed:
            span, host, device = (median(s[key] for s in timed) for key in ("span_us", "host_us", "device_us"))
            print(f"| {label} | {len(timed)} | {span:.0f} | {host:.0f} | {device:.0f} | {host + device:.0f} |")
    full = {label: [s for s in steps if s["launches"] == 1] for label, steps in sides.items()}
    if not all(full.values()):
        return
    per_step = {}
    for label, steps in full.items():
        total: dict[str, float] = defaultdict(float)
        for step in steps:
            for name, us in step["top"].items():
                total[name] += us / len(steps)
        per_step[label] = total
    base, variant = per_step["base"], per_step["variant"]
    print(
        f"\nfull-graph steps, host top-level ops: base {sum(base.values()):.0f} µs a step, variant"
        f" {sum(variant.values()):.0f}; the rest of each step's host time is Python between ops"
    )
    print("| host op (outermost) | base µs a step | variant µs a step | change |")
    print("|---|---|---|---|")
    for name in sorted(set(base) | set(variant), key=lambda n: base.get(n, 0.0) - variant.get(n, 0.0))[:12]:
        print(
            f"| `{name}` | {base.get(name, 0.0):.1f} | {variant.get(name, 0.0):.1f} "
            f"| {variant.get(name, 0.0) - base.get(name, 0.0):+.1f} |"
        )


if __name__ == "__main__":
    main()
