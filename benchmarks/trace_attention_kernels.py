"""An attention layer's kernels in a trace, kernel by kernel: calls, mean and p50 µs a call of every
kernel whose name holds one of the pieces given (by default the layer kernels' names, tasks/gemm/
kv_layer_kernels.py, and the Triton MLA backend's query concatenation and zeroed outputs), all calls
(prefill's too: their count tells them apart). What tests/test_h100_kimik2.py's layer figures come from:

    python benchmarks/trace_attention_kernels.py benchmarks/results/h100_kimik2_run1_base.rank0.trace.json.gz \
        benchmarks/results/h100_kimik2_run1_fp8_kv_cache.rank0.trace.json.gz
"""

from __future__ import annotations

import gzip
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tasks.gemm.kv_layer_kernels import KERNELS  # noqa: E402

PIECES = [piece for pieces in KERNELS.values() for piece in pieces] + ["CatArrayBatchedCopy", "FillFunctor"]


def main() -> None:
    for path in sys.argv[1:]:
        events = orjson.loads(gzip.open(path).read())["traceEvents"]
        durations: dict[str, list[float]] = defaultdict(list)
        for event in events:
            if event.get("cat") == "kernel" and any(piece in event["name"] for piece in PIECES):
                durations[event["name"]].append(event["dur"])
        print(f"# {path}\n| calls | mean µs | p50 µs | kernel |\n|---|---|---|---|")
        for name, us in sorted(durations.items(), key=lambda item: -len(item[1])):
            print(f"| {len(us)} | {statistics.fmean(us):.3f} | {statistics.median(us):.3f} | `{name[:110]}` |")


if __name__ == "__main__":
    main()
