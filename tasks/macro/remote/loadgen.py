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
compare the client's view with the server's own histograms.

Prints one JSON document.
"""

import argparse
import asyncio
import json
import os
import random
import time
import urllib.request

from loadgen_prompts import prompt_source
from loadgen_schedule import KEEP_ALIVE_S, arrival_times
from telemetry import Telemetry

try:
    from host_progress import Reporter  # shipped beside this script (tasks/host_progress.py)
except ImportError:  # run by hand without it: no progress lines
    Reporter = None

COUNTERS = (
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    # Speculative decoding (present only on a server started with --speculative-config):
    # drafts proposed, draft tokens, tokens accepted; per position below.
    "vllm:spec_decode_num_drafts_total",
    "vllm:spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total",
)
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
WATCHED = (
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:request_time_per_output_token_seconds",
    "vllm:e2e_request_latency_seconds",
)


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


def scrape_metrics(base_url):
    """Sum and count of each watched histogram (summed over label sets)."""
    try:
        text = urllib.request.urlopen(base_url + "/metrics", timeout=10).read().decode()
    except Exception as err:  # noqa: BLE001 - the cross-check is optional; the run is not
        return {"error": repr(err)}
    totals = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        for name in COUNTERS:
            if line.startswith(name + "{") or line.startswith(name + " "):
                totals[name] = totals.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
        if line.startswith(PER_POSITION + "{") and 'position="' in line:
            position = line.split('position="', 1)[1].split('"', 1)[0]
            key = f"{PER_POSITION}[{position}]"
            totals[key] = totals.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
        for name in WATCHED:
            for suffix in ("_sum", "_count"):
                if line.startswith(name + suffix + "{") or line.startswith(name + suffix + " "):
                    value = float(line.rsplit(" ", 1)[1])
                    key = name + suffix
                    totals[key] = totals.get(key, 0.0) + value
    return totals


async def metrics_delta(base_url, before, requests):
    """The server's counters over a run: after minus ``before``. The server records a request's
    histograms after its stream ends: wait (10 s at most) until it has counted every request of
    this run, so the delta covers exactly this run. Returns the delta and the last scrape."""
    counter = "vllm:e2e_request_latency_seconds_count"
    expected = before.get(counter, 0.0) + requests
    deadline = time.perf_counter() + 10
    after = scrape_metrics(base_url)
    while counter in after and after[counter] < expected and time.perf_counter() < deadline:
        await asyncio.sleep(0.05)
        after = scrape_metrics(base_url)
    return {key: after[key] - before.get(key, 0.0) for key in after if isinstance(after.get(key), float)}, after


class Connection:
    def __init__(self, host, port):
        self.host, self.port = host, port
        self.reader = self.writer = None

    async def open(self):
        if self.writer is None or self.writer.is_closing():
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port, limit=1 << 22)

    def close(self):
        if self.writer is not None:
            self.writer.close()
            self.writer = None


async def stream_request(conn, path, body, keep_text=False):
    """One streamed request; returns the record. Timestamps are taken as bytes arrive. With
    `return_token_ids` in the body (vLLM), the prompt's and the output's token ids are kept too
    (the n-gram drafter is replayed over them: tasks/decisions/ngram_replay.py); with
    ``keep_text``, the answer's text (a conversation's history). Where the server reports it
    (vLLM's --enable-prompt-tokens-details), the prompt tokens it served from its prefix cache."""
    record_ids = bool(body.get("return_token_ids"))
    payload = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {conn.host}:{conn.port}\r\n"
        f"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    ).encode()
    record = {"ttft_s": None, "itl_s": [], "e2e_s": None, "stream_end_s": None, "output_tokens": None, "error": None}
    await conn.open()
    reader = conn.reader
    started = time.perf_counter()
    conn.writer.write(head + payload)
    await conn.writer.drain()
    status_line = await reader.readline()
    status = int(status_line.split()[1]) if status_line else 0
    headers = {}
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        key, _, value = line.decode().partition(":")
        headers[key.strip().lower()] = value.strip()
    chunked = headers.get("transfer-encoding", "").lower() == "chunked"
    buffer = b""
    last = None
    done = False

    def handle_event(data, now):
        nonlocal last, done
        if data == b"[DONE]":
            done = True
            return
        event = json.loads(data)
        if event.get("error") and record["error"] is None:
            # vLLM reports a request it refuses after the stream began as an event (status 200)
            failure = event["error"]
            record["error"] = "in-stream error: " + str(
                failure.get("message") if isinstance(failure, dict) else failure
            )
        if event.get("choices"):
            if record["ttft_s"] is None:
                record["ttft_s"] = now - started
            else:
                record["itl_s"].append(now - last)
            last = now
        if record_ids and event.get("choices"):
            choice = event["choices"][0]
            if choice.get("prompt_token_ids") is not None and "prompt_ids" not in record:
                record["prompt_ids"] = list(choice["prompt_token_ids"])
            if choice.get("token_ids"):
                record.setdefault("output_ids", []).extend(choice["token_ids"])
        if keep_text and event.get("choices"):
            choice = event["choices"][0]
            piece = choice.get("text") or (choice.get("delta") or {}).get("content") or ""
            record["text"] = record.get("text", "") + piece
        usage = event.get("usage")
        if usage:
            record["output_tokens"] = usage.get("completion_tokens")
            record["prompt_tokens"] = usage.get("prompt_tokens")
            details = usage.get("prompt_tokens_details") or {}
            if details.get("cached_tokens") is not None:
                record["cached_tokens"] = details["cached_tokens"]

    async def body_pieces():
        if chunked:
            while True:
                size_line = await reader.readline()
                size = int(size_line.strip().split(b";")[0] or b"0", 16)
                if size == 0:
                    await reader.readline()
                    return
                piece = await reader.readexactly(size)
                await reader.readexactly(2)
                yield piece
        else:
            length = int(headers.get("content-length", "0"))
            if length:
                yield await reader.readexactly(length)

    async for piece in body_pieces():
        now = time.perf_counter()
        buffer += piece
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    handle_event(line[5:].strip(), now)
    record["stream_end_s"] = time.perf_counter() - started
    record["e2e_s"] = (last - started) if last is not None else record["stream_end_s"]
    if status != 200:
        record["error"] = f"HTTP {status}: {buffer[:300].decode(errors='replace')}"
    elif not done and record["error"] is None:
        record["error"] = "stream ended without [DONE]"
    elif record["ttft_s"] is None and record["error"] is None:
        record["error"] = "the stream carried no token"
    if headers.get("connection", "").lower() == "close":
        conn.close()
    return record


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
