"""Streaming load client that runs on the host next to the server (standard library only).

Sends /v1/completions with random-token prompts of a fixed length (or /v1/chat/completions, or
text prompts: fixed-length synthetic text or a ShareGPT file), `ignore_eos`, a fixed
max_tokens and `stream_options.include_usage`, over one persistent HTTP/1.1 connection per
concurrent worker, and records per request: TTFT, the gaps between streamed chunks, E2E and
output tokens from `usage`. Timing follows vLLM's `vllm bench serve`: a chunk counts when it
carries `choices`; TTFT is the first such chunk; ITL are the gaps between them; E2E ends at the
last such chunk (its `latency`), not at `[DONE]`, which is kept apart as `stream_end_s`.

Two load shapes: closed loop (`--concurrency` workers, each sending its next request when the
last one ends), or open loop (`--request-rate` requests a second, arrival gaps drawn from a
gamma distribution of shape `--burstiness`, 1 = Poisson, scaled so the run's gaps add up to
exactly (requests - 1) / rate; `--concurrency` then caps the requests in flight). Each request
records when it was due and when it was sent.

Also snapshots the server's Prometheus /metrics before and after the run, so the controller can
compare the client's view with the server's own histograms (the HTTP and /metrics parts are in
loadgen_server.py), and with `--telemetry-interval-s` samples power and clocks over the run
(telemetry.py, a process of its own).

Prints one JSON document.
"""

import argparse
import asyncio
import json
import os
import random
import time

from loadgen_prompts import prompt_source
from loadgen_schedule import KEEP_ALIVE_S, arrival_times
from loadgen_server import Connection, metrics_delta, scrape_metrics, stream_request
from telemetry import Telemetry

try:
    from host_progress import Reporter  # shipped beside this script (tasks/host_progress.py)
except ImportError:  # run by hand without it: no progress lines
    Reporter = None


def scheduling(pid_file):
    """Whether this client and the server share a scheduler autogroup (one per session on Linux
    with sched_autogroup_enabled=1). Apart, a busy host was measured delivering the server's
    stream in bursts to this client."""
    facts = {"client_sid": os.getsid(0)}
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled") as handle:
            facts["autogroup_enabled"] = handle.read().strip() == "1"
    except OSError:
        facts["autogroup_enabled"] = None
    try:
        with open(pid_file) as handle:
            facts["server_sid"] = os.getsid(int(handle.read().strip()))
    except (OSError, ValueError, TypeError):
        facts["server_sid"] = None
    return facts


async def run(args):
    rng = random.Random(args.seed)
    next_prompt = prompt_source(args, rng)
    path = "/v1/chat/completions" if args.endpoint == "chat" else "/v1/completions"

    def body():
        prompt, max_tokens = next_prompt()
        common = {
            "model": args.model,
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "stream": True,
            "temperature": 0.0,
            "stream_options": {"include_usage": True},
        }
        if args.token_ids:
            common["return_token_ids"] = True  # vLLM >= 0.10.2; other servers ignore an unknown key
        if args.endpoint == "chat":
            return {**common, "messages": [{"role": "user", "content": prompt}]}
        return {**common, "prompt": prompt}

    host, port = args.host, args.port
    warmup_base = scrape_metrics(f"http://{host}:{port}").get("vllm:e2e_request_latency_seconds_count")
    for _ in range(args.warmup):
        conn = Connection(host, port)
        try:
            await stream_request(conn, path, body())
        except Exception:  # noqa: BLE001 - a failing server shows in the measured requests
            pass
        conn.close()
    if warmup_base is not None and args.warmup:
        deadline = time.perf_counter() + 10
        while time.perf_counter() < deadline:
            now = scrape_metrics(f"http://{host}:{port}").get("vllm:e2e_request_latency_seconds_count", 0.0)
            if now >= warmup_base + args.warmup:
                break
            await asyncio.sleep(0.05)
    schedule = None
    if args.schedule:
        # A replayed trace: each row is (offset s, input tokens, output tokens); the prompt source
        # reads the lengths from args as it makes each prompt.
        with open(args.schedule) as handle:
            rows = json.load(handle)
        bodies, schedule = [], [row[0] for row in rows]
        for _, input_tokens, output_tokens in rows:
            args.input_tokens, args.output_tokens = input_tokens, output_tokens
            bodies.append(body())
    else:
        bodies = [body() for _ in range(args.requests)]
    queue = asyncio.Queue()
    for item in bodies:
        queue.put_nowait(item)
    records = []
    report = Reporter() if Reporter is not None and args.progress_label else None
    tokens = [0]

    def finished(record):
        records.append(record)
        tokens[0] += record.get("output_tokens") or 0
        if report is not None:
            elapsed = time.perf_counter() - started
            report(
                args.progress_label,
                len(records),
                len(bodies),
                "requests",
                f"{tokens[0] / elapsed:,.0f} output tok/s" if elapsed > 0 else "",
            )

    async def send(conn, item):
        try:
            return await stream_request(conn, path, item)
        except Exception as err:  # noqa: BLE001 - any failure of one request is that request's outcome, recorded
            conn.close()
            return {
                "ttft_s": None,
                "itl_s": [],
                "e2e_s": None,
                "stream_end_s": None,
                "output_tokens": None,
                "error": f"{type(err).__name__}: {err}",
            }

    async def worker():
        conn = Connection(host, port)
        while True:
            try:
                item = queue.get_nowait()
            except asyncio.QueueEmpty:
                break
            sent = time.perf_counter() - started
            record = await send(conn, item)
            finished({**record, "sent_s": sent})
        conn.close()

    idle = []
    in_flight = asyncio.Semaphore(args.concurrency)

    async def arrival(item, due):
        await asyncio.sleep(max(0.0, started + due - time.perf_counter()))
        async with in_flight:
            # A kept-alive connection idle longer than KEEP_ALIVE_S may be closed by the server
            # (uvicorn closes after 5 s): a trace's long gaps would then lose a request to it.
            while idle and time.perf_counter() - idle[-1][1] > KEEP_ALIVE_S:
                idle.pop()[0].close()
            conn = idle.pop()[0] if idle else Connection(host, port)
            sent = time.perf_counter() - started
            record = await send(conn, item)
            idle.append((conn, time.perf_counter()))
        finished({**record, "due_s": due, "sent_s": sent})

    base = f"http://{host}:{port}"
    before = scrape_metrics(base)
    telemetry = Telemetry(args.telemetry_interval_s) if args.telemetry_interval_s > 0 else None
    if telemetry is not None:
        telemetry.start()  # its own process: power and clocks over exactly the measured window
    started = time.perf_counter()
    if args.request_rate > 0 or schedule is not None:
        if schedule is None:
            schedule = arrival_times(len(bodies), args.request_rate, args.burstiness, args.seed)
        await asyncio.gather(*(arrival(item, due) for item, due in zip(bodies, schedule, strict=True)))
        for conn, _ in idle:
            conn.close()
    else:
        await asyncio.gather(*(worker() for _ in range(args.concurrency)))
    duration = time.perf_counter() - started
    power = telemetry.finish() if telemetry is not None else None
    delta, after = await metrics_delta(base, before, len(records))
    return {
        "concurrency": args.concurrency,
        "requests": records,
        "duration_s": duration,
        "request_rate": args.request_rate or None,
        "burstiness": args.burstiness if args.request_rate else None,
        "input_tokens": args.input_tokens,
        "max_tokens": args.output_tokens,
        "endpoint": path,
        "dataset": args.dataset,
        "server_metrics_delta": delta,
        "server_metrics_error": before.get("error") or after.get("error"),
        "scheduling": scheduling(args.server_pid_file),
        "telemetry": power,
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--input-tokens", type=int, default=64)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument(
        "--concurrency",
        type=int,
        default=1,
        help="closed loop: workers; with --request-rate: the most requests in flight",
    )
    parser.add_argument("--request-rate", type=float, default=0.0, help="open loop, requests a second (0: closed loop)")
    parser.add_argument("--burstiness", type=float, default=1.0, help="gamma shape of the arrival gaps (1: Poisson)")
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--server-pid-file", help="the server's pid file, to compare sessions")
    parser.add_argument("--endpoint", choices=("completions", "chat"), default="completions")
    parser.add_argument(
        "--dataset",
        choices=("random", "synthetic", "sharegpt"),
        default="random",
        help="random token ids (text with --endpoint chat), fixed-length text, or a ShareGPT file",
    )
    parser.add_argument("--dataset-path", help="the ShareGPT-format JSON file (--dataset sharegpt)")
    parser.add_argument("--progress-label", help="name the run in progress lines on stderr (none without it)")
    parser.add_argument("--token-ids", action="store_true", help="ask for and keep each request's token ids")
    parser.add_argument("--shared-prefix", type=int, default=0, help="tokens of a system prompt every request shares")
    parser.add_argument(
        "--telemetry-interval-s", type=float, default=0.0, help="sample power and clocks this often (0: not)"
    )
    parser.add_argument(
        "--schedule", help="a JSON list of [offset s, input tokens, output tokens]: arrivals replayed from a trace"
    )
    parser.add_argument(
        "--tokenizer", help="the model folder: text prompts are cut to --input-tokens with its tokenizer"
    )
    print(json.dumps(asyncio.run(run(parser.parse_args()))))


if __name__ == "__main__":
    main()
