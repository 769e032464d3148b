"""The GPU drafter micro's rows put into the stored H100 campaigns, their speculative predictions made again:
`spec_gpu_step_extra_ms` assumed 0 (as each campaign predicted) beside the drafter's time a step standing in.

Each campaign's drafter time was measured on its own H100 by benchmarks/ngram_drafter_time.py in the run's
pack step (vLLM 0.26's ngram_gpu search over the campaign's recorded requests, the kernel and timing
tasks/gemm/remote/ngram_gpu_bench.py now runs in the micro phase), after its experiments, so this judges the
rule in-sample: the rule has no fitted factor (the drafter's time is a part of the step's extra, which nine
experiments measured at 1.24-3.0x it), but it was chosen after these runs.

usage: python benchmarks/drafter_in_place.py
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.predictions_again import predictions_again  # noqa: E402

DATA, RESULTS = ROOT / "tests" / "data", ROOT / "benchmarks" / "results"
RUNS = [  # (label, todo, campaign config, the pack step's drafter timing)
    ("Llama-8B run 1", "h100_llama8b_run1_todo.json.gz", "h100_llama8b_experiments.toml", "h100_llama8b_ngram_drafter_time.txt"),
    ("Llama-8B run 5", "h100_llama8b_run5_todo.json.gz", "h100_llama8b_auto_experiments.toml", "h100_llama8b_run5_ngram_drafter_time.txt"),
    ("Qwen3-MoE run 3", "h100_qwen3moe_run3_todo.json.gz", "h100_qwen3moe_all_experiments.toml", "h100_qwen3moe_run3_ngram_drafter_time.txt"),
    ("Qwen3-MoE run 4", "h100_qwen3moe_run4_todo.json.gz", "h100_qwen3moe_all_experiments.toml", "h100_qwen3moe_run4_ngram_drafter_time.txt"),
    ("Qwen3-MoE run 6", "h100_qwen3moe_run6_todo.json.gz", "h100_qwen3moe_auto_experiments.toml", "h100_qwen3moe_run6_ngram_drafter_time.txt"),
    ("Kimi-K2 4-layer run 1", "h100_kimik2_run1_todo.json.gz", "h100_kimik2_all_experiments.toml", "h100_kimik2_run1_ngram_drafter_time.txt"),
    ("Kimi-K2 4-layer run 2", "h100_kimik2_run2_todo.json.gz", "h100_kimik2_all_experiments.toml", "h100_kimik2_run2_ngram_drafter_time.txt"),
    ("Kimi-K2 4-layer run 3", "h100_kimik2_run3_todo.json.gz", "h100_kimik2_all_experiments.toml", "h100_kimik2_run3_ngram_drafter_time.txt"),
    ("Kimi-K2 4-layer run 4", "h100_kimik2_run4_todo.json.gz", "h100_kimik2_all_experiments.toml", "h100_kimik2_run4_ngram_drafter_time.txt"),
]  # fmt: skip
SHIPPED = {"min_n": 2, "max_n": 4, "k": 3}  # the drafter the timings used (benchmarks/ngram_drafter_time.py)
ROW = re.compile(r"^\| (\d+) \| [^|]+ \| ([\d.]+) \|$")


def drafter_rows(timing: Path) -> list[dict]:
    return [
        {"sequences": int(match[1]), **SHIPPED, "us": float(match[2])}
        for line in timing.read_text().splitlines()
        if (match := ROW.match(line))
    ]


def with_rows(todo: Path, rows: list[dict], folder: Path) -> Path:
    state = json.loads(gzip.decompress(todo.read_bytes()))
    next(t for t in state["todos"] if t["id"] == "gemm_bench")["result"]["drafter_rows"] = rows
    path = folder / todo.name.removesuffix(".gz")
    path.write_text(json.dumps(state))
    return path


def main() -> None:
    print("| campaign | level | drafter ms | predicted, assumed 0 | predicted, drafter | realised | ratio | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    before, after = [], []
    with tempfile.TemporaryDirectory() as folder:
        for label, todo, config, timing in RUNS:
            rows = drafter_rows(RESULTS / timing)
            old = predictions_again(DATA / todo, DATA / config)[1]
            new = predictions_again(with_rows(DATA / todo, rows, Path(folder)), DATA / config)[1]
            for a, b in zip(old, new, strict=True):
                if a.experiment != "speculative_decoding_gpu":
                    continue
                real = a.realised.delta_ms
                ms = next((r["us"] for r in sorted(rows, key=lambda r: r["sequences"]) if r["sequences"] >= a.concurrency), rows[-1]["us"]) / 1000  # fmt: skip
                before.append(abs(a.predicted_ms / real - 1))
                after.append(abs(b.predicted_ms / real - 1))
                print(
                    f"| {label} | c={a.concurrency} | {ms:.3f} | {a.predicted_ms:+.3f} | {b.predicted_ms:+.3f} |"
                    f" {real:+.3f} | {a.predicted_ms / real:.2f} | {b.predicted_ms / real:.2f} |"
                )
    within = sum(error <= 0.25 for error in after)
    print(
        f"\nmedian error over {len(before)} rows: {statistics.median(before):.1%} with the step cost assumed 0,"
        f" {statistics.median(after):.1%} with the drafter's time; within 0.8-1.25: "
        f"{sum(e <= 0.25 for e in before)} and {within}"
    )


if __name__ == "__main__":
    main()
