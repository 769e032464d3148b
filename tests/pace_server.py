"""A deliberate fake: an OpenAI-style streaming server that emits tokens at a known pace.

It exists to give the load client ground truth: it records when it actually wrote each
request's first and last token chunks, so client-side TTFT/TPOT can be compared with what
really happened on the wire. Standard library only. Run as a process:
    python pace_server.py PORT TTFT_MS PACE_MS [FAIL_EVERY] [STALL_MS] [TAIL_MS] [DIE_AFTER]
GET /stats returns the per-request records (with the path and prompt each came with;
/v1/chat/completions streams chat deltas); GET /history each generation request's whole prompt or
messages; with `return_token_ids` a completion's chunks carry token ids (output i is 1000 + i);
with $PACE_VOCAB=n a token-id prompt with an id >= n gets vLLM's in-stream refusal (an error
event, then [DONE], status 200); with $PACE_PREFIX_HITS=n, GET /metrics has vLLM's prefix-cache counters, starting at 100000 queries
and 90000 hits, each token-id completion adding its prompt's length and n; GET /health and /v1/models answer as vLLM's do (the
model id from $PACE_MODEL, default "pace"), so a campaign can adopt it as its server. Injected faults: FAIL_EVERY=n answers every n-th
request with 500; STALL_MS pauses each stream once, halfway, before a token (an API server that
stops delivering); TAIL_MS waits between the last token and the usage chunk and `[DONE]`;
DIE_AFTER=n exits the whole process when the (n+1)-th completion request arrives (a server that
dies mid-benchmark). $PACE_SLOW="3-4,7-8" streams those completion requests (1-based, in arrival
order) at $PACE_SLOW_FACTOR (default 3) times the pace: a run that is slow for a while.
$PACE_CAPACITY=n streams at most n requests at a time, the rest wait their turn (a server of known
capacity: n / (TTFT + (tokens - 1) x pace) requests a second).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

RECORDS: list[dict] = []
HISTORY: list[dict] = []  # each generation request's whole prompt or messages, in arrival order
COUNTER = {"n": 0}
PREFIX = {"queries": 100000.0, "hits": 90000.0}
DIE_AFTER = {"n": 0}
CAPACITY: dict = {}


async def answer(writer: asyncio.StreamWriter, payload: bytes, content_type: str) -> None:
    """A plain 200 response with ``payload``."""
    writer.write(
        f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {len(payload)}\r\n\r\n".encode() + payload
    )
    await writer.drain()


async def handle(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    ttft: float,
    pace: float,
    fail_every: int,
    stall: float,
    tail: float,
) -> None:
    try:
        while True:
            request_line = await reader.readline()
            if not request_line:
                return
            headers = {}
            while (line := await reader.readline()) not in (b"\r\n", b""):
                key, _, value = line.decode().partition(":")
                headers[key.strip().lower()] = value.strip()
            body = await reader.readexactly(int(headers.get("content-length", 0)))
            method, path, _ = request_line.decode().split(" ", 2)
            if path in ("/stats", "/history"):
                payload = json.dumps(RECORDS if path == "/stats" else HISTORY).encode()
                await answer(writer, payload, "application/json")
                continue
            if path == "/metrics" and os.environ.get("PACE_PREFIX_HITS"):
                # vLLM's prefix-cache counters: they start high (an earlier run's), each completion adds
                # its prompt length to the queries and $PACE_PREFIX_HITS to the hits
                payload = (
                    f"# TYPE vllm:prefix_cache_queries counter\n"
                    f'vllm:prefix_cache_queries_total{{engine="0",model_name="pace"}} {PREFIX["queries"]}\n'
                    f'vllm:prefix_cache_hits_total{{engine="0",model_name="pace"}} {PREFIX["hits"]}\n'
                ).encode()
                await answer(writer, payload, "text/plain")
                continue
            if path in ("/health", "/v1/models"):
                payload = (
                    b""
                    if path == "/health"
                    else json.dumps({"object": "list", "data": [{"id": os.environ.get("PACE_MODEL", "pace")}]}).encode()
                )
                await answer(writer, payload, "application/json")
                continue
            if path not in ("/v1/completions", "/v1/chat/completions"):
                writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
                continue
            COUNTER["n"] += 1
            if DIE_AFTER["n"] and COUNTER["n"] > DIE_AFTER["n"]:
                os._exit(1)
            if fail_every and COUNTER["n"] % fail_every == 0:
                message = b'{"error": "injected failure"}'
                writer.write(
                    b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
                    b"Content-Length: " + str(len(message)).encode() + b"\r\n\r\n" + message
                )
                await writer.drain()
                continue
            request = json.loads(body)
            tokens = request["max_tokens"]
            prompt = request["messages"][-1]["content"] if "messages" in request else request["prompt"]
            HISTORY.append({"messages": request.get("messages"), "prompt": request.get("prompt")})
            vocab = int(os.environ.get("PACE_VOCAB") or 0)
            if vocab and isinstance(prompt, list) and max(prompt, default=0) >= vocab:
                # as vLLM refuses an out-of-vocabulary token after the stream began: an error event, then [DONE]
                refusal = json.dumps(
                    {"error": {"message": f"Token id {max(prompt)} is out of vocabulary", "code": 400}}
                )
                events = f"data: {refusal}\n\ndata: [DONE]\n\n".encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                    + f"{len(events):x}\r\n".encode()
                    + events
                    + b"\r\n0\r\n\r\n"
                )
                await writer.drain()
                continue
            if isinstance(request.get("prompt"), list) and os.environ.get("PACE_PREFIX_HITS"):
                PREFIX["queries"] += len(request["prompt"])
                PREFIX["hits"] += float(os.environ["PACE_PREFIX_HITS"])
            slow = any(
                int(a) <= COUNTER["n"] <= int(b)
                for a, _, b in (
                    part.partition("-") for part in filter(None, os.environ.get("PACE_SLOW", "").split(","))
                )
            )
            factor = float(os.environ.get("PACE_SLOW_FACTOR", "3")) if slow else 1.0
            async with CAPACITY["slots"]:
                await stream(
                    writer,
                    tokens,
                    ttft,
                    pace * factor,
                    stall,
                    tail,
                    path,
                    prompt,
                    bool(request.get("return_token_ids")),
                )
    except (ConnectionError, asyncio.IncompleteReadError):
        return
    finally:
        writer.close()


async def stream(
    writer: asyncio.StreamWriter,
    tokens: int,
    ttft: float,
    pace: float,
    stall: float,
    tail: float,
    path: str = "/v1/completions",
    prompt: object = None,
    token_ids: bool = False,
) -> None:
    loop = asyncio.get_running_loop()
    received = loop.time()
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")

    def chunk(data: bytes) -> None:
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    first_at = last_at = None
    for index in range(tokens):
        # Absolute deadlines, so sleep overshoot does not accumulate into the pace.
        delay = stall if index >= tokens // 2 and tokens > 1 else 0.0
        await asyncio.sleep(max(0.0, received + ttft + index * pace + delay - loop.time()))
        if token_ids:  # vLLM's return_token_ids: output token i is id 1000 + i
            chunk(b'data: {"choices": [{"index": 0, "text": "x", "token_ids": [%d]}]}\n\n' % (1000 + index))
        else:
            chunk(
                b'data: {"choices": [{"index": 0, "delta": {"content": "x"}}]}\n\n'
                if path.endswith("chat/completions")
                else b'data: {"choices": [{"index": 0, "text": "x"}]}\n\n'
            )
        await writer.drain()
        last_at = time.perf_counter()
        if first_at is None:
            first_at = last_at
    await asyncio.sleep(tail)
    chunk(b'data: {"choices": [], "usage": {"completion_tokens": ' + str(tokens).encode() + b"}}\n\n")
    chunk(b"data: [DONE]\n\n")
    chunk(b"")
    await writer.drain()
    RECORDS.append(
        {
            "tokens": tokens,
            "tpot_s": (last_at - first_at) / (tokens - 1) if tokens > 1 else None,
            "path": path,
            "prompt": prompt,
        }
    )


def flags(argv: list[str]) -> tuple[list[str], dict[str, float]]:
    """Positional arguments and the flags after them, as a campaign's `service.command` plus an
    experiment's `extra_args` give them: `--pace-ms X` streams at another pace (a variant flag
    whose effect is known exactly); any other flag is refused as vLLM refuses one (exit 2)."""
    first_flag = next((i for i, a in enumerate(argv) if a.startswith("--")), len(argv))
    positional, rest = argv[:first_flag], argv[first_flag:]
    given: dict[str, float] = {}
    if len(rest) % 2:
        raise SystemExit(f"pace_server: error: each flag takes a value: {rest}")
    for name, value in zip(rest[::2], rest[1::2], strict=True):
        if name != "--pace-ms":
            raise SystemExit(f"pace_server: error: unrecognized arguments: {name}")
        given[name] = float(value)
    return positional, given


async def main() -> None:
    positional, given = flags(sys.argv[1:])
    sys.argv[1:] = positional
    port, ttft_ms, pace_ms = int(sys.argv[1]), float(sys.argv[2]), given.get("--pace-ms", float(sys.argv[3]))
    fail_every, stall_ms, tail_ms = (
        int(sys.argv[4]) if len(sys.argv) > 4 else 0,
        *(float(a) for a in (sys.argv[5:7] + ["0", "0"])[:2]),
    )
    DIE_AFTER["n"] = int(sys.argv[7]) if len(sys.argv) > 7 else 0
    CAPACITY["slots"] = asyncio.Semaphore(int(os.environ.get("PACE_CAPACITY") or 1_000_000))
    server = await asyncio.start_server(
        lambda r, w: handle(r, w, ttft_ms / 1000, pace_ms / 1000, fail_every, stall_ms / 1000, tail_ms / 1000),
        "127.0.0.1",
        port,
        backlog=1024,
    )
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
