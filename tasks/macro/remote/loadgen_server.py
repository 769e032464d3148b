"""Talking to the server, for the load clients (standard library only; shipped beside them):
one persistent HTTP/1.1 connection, a streamed request timed as its bytes arrive, and the
Prometheus /metrics counters and histograms before and after a run."""

import asyncio
import json
import time
import urllib.request

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
