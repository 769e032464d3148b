"""Multi-turn conversations against the server, from the host (standard library only; shipped
beside loadgen.py; its streaming request is loadgen_server.py's, so the timing is the same as every level's).

A conversation is `--turns` requests in order: turn n sends the whole history (every earlier
user message and the model's own answers, as the server returned them) plus a new user message,
then waits `--think-time-s` before the next turn. `--concurrency` conversations run at once; a
finished conversation makes room for the next one, until `--conversations` have run.

Two sources of user messages:
- generated: `--turn-input-tokens` random token ids a message on /v1/completions (the history
  is token ids: the prompt's and the answer's, from vLLM's `return_token_ids`), or random words
  on /v1/chat/completions (the history is messages, the answers as text);
- `--sharegpt FILE`: the human turns of the file's multi-turn conversations (each cut to
  `--turn-input-tokens`), on /v1/chat/completions; the model's answers replace the file's.
Each conversation starts with a unique id, so conversations share nothing but what they send
themselves: every prefix-cache hit is a turn reusing its own history.

Each request's record carries its conversation, turn and, where the server reports it
(`--enable-prompt-tokens-details`), the prompt tokens it served from its prefix cache
(`usage.prompt_tokens_details.cached_tokens`). The server's /metrics counters before and after
the whole run are kept too. Prints one JSON document.
"""

import argparse
import asyncio
import json
import random
import time

from loadgen_prompts import WORDS, cut_text, load_tokenizer, unique_prefix
from loadgen_server import Connection, metrics_delta, scrape_metrics, stream_request
from telemetry import Telemetry

try:
    from host_progress import Reporter
except ImportError:  # run by hand without it: no progress lines
    Reporter = None


def sharegpt_conversations(path, turns):
    """The human turns of each conversation with at least ``turns`` of them, in order."""
    with open(path, encoding="utf-8") as handle:
        entries = json.load(handle)
    found = []
    for entry in entries if isinstance(entries, list) else []:
        messages = (entry.get("conversations") or entry.get("conversation") or []) if isinstance(entry, dict) else []
        human = [
            str(m.get("value", ""))
            for m in messages
            if isinstance(m, dict) and m.get("from") in ("human", "user") and str(m.get("value", "")).strip()
        ]
        if len(human) >= turns:
            found.append(human[:turns])
    if not found:
        raise SystemExit(
            f"{path}: no conversation with {turns} human turns (ShareGPT format: [{{'conversations':"
            " [{'from': 'human', 'value': ...}, {'from': 'gpt', 'value': ...}, ...]}])"
        )
    return found


class Conversation:
    """One conversation's history and how its next request is made."""

    def __init__(self, args, rng, uid, user_texts):
        self.args, self.rng = args, rng
        self.high = max(20, args.vocab - 10)
        self.user_texts = user_texts
        self.token_history = unique_prefix(uid, 10, self.high)
        self.messages = []
        self.tag = f"[{uid:x}] "
        self.tokenizer = load_tokenizer(args.tokenizer) if args.endpoint == "chat" else None

    def body(self, turn):
        common = {
            "model": self.args.model,
            "max_tokens": self.args.turn_output_tokens,
            "ignore_eos": True,
            "stream": True,
            "temperature": 0.0,
            "stream_options": {"include_usage": True},
        }
        if self.args.endpoint == "completions":
            message = [self.rng.randrange(10, self.high) for _ in range(self.args.turn_input_tokens)]
            self.token_history = self.token_history + message
            return {**common, "prompt": self.token_history, "return_token_ids": True}
        if self.user_texts is not None:
            text = self.user_texts[turn - 1]
        else:
            text = " ".join(self.rng.choice(WORDS) for _ in range(2 * self.args.turn_input_tokens + 8))
        text = cut_text((self.tag if turn == 1 else "") + text, self.args.turn_input_tokens, self.tokenizer)
        self.messages.append({"role": "user", "content": text})
        return {**common, "messages": list(self.messages)}

    def answered(self, record):
        """The model's answer joins the history; False when it cannot (the turn failed, or the
        server returned no token ids to continue from)."""
        if record.get("error"):
            return False
        if self.args.endpoint == "completions":
            output = record.pop("output_ids", None)
            record.pop("prompt_ids", None)
            if not output:
                record["error"] = "the server returned no token ids (vLLM's return_token_ids) to continue from"
                return False
            self.token_history = self.token_history + output
            return True
        self.messages.append({"role": "assistant", "content": record.pop("text", "")})
        return True


async def run(args):
    rng = random.Random(args.seed)
    run_id = random.SystemRandom().getrandbits(40) << 20
    texts = sharegpt_conversations(args.sharegpt, args.turns) if args.sharegpt else None
    path = "/v1/chat/completions" if args.endpoint == "chat" else "/v1/completions"
    base = f"http://{args.host}:{args.port}"
    queue = asyncio.Queue()
    for index in range(args.conversations):
        queue.put_nowait(index)
    records, finished = [], []
    report = Reporter() if Reporter is not None and args.progress_label else None
    total = args.conversations * args.turns

    async def converse(index, conn):
        user_texts = texts[rng.randrange(len(texts))] if texts is not None else None
        conversation = Conversation(args, rng, run_id + index, user_texts)
        began = time.perf_counter() - started
        for turn in range(1, args.turns + 1):
            body = conversation.body(turn)
            sent = time.perf_counter() - started
            try:
                record = await stream_request(conn, path, body, keep_text=args.endpoint == "chat")
            except Exception as err:  # noqa: BLE001 - a failed turn ends its conversation, recorded
                conn.close()
                record = {"ttft_s": None, "itl_s": [], "e2e_s": None, "output_tokens": None}
                record["error"] = f"{type(err).__name__}: {err}"
            going_on = conversation.answered(record)
            records.append({**record, "conversation": index, "turn": turn, "sent_s": sent})
            if report is not None:
                report(args.progress_label, len(records), total, "turns")
            if not going_on:
                return
            if turn < args.turns and args.think_time_s > 0:
                await asyncio.sleep(args.think_time_s)
        finished.append({"conversation": index, "start_s": began, "end_s": time.perf_counter() - started})

    async def worker():
        conn = Connection(args.host, args.port)
        while True:
            try:
                index = queue.get_nowait()
            except asyncio.QueueEmpty:
                break
            await converse(index, conn)
        conn.close()

    before = scrape_metrics(base)
    telemetry = Telemetry(args.telemetry_interval_s) if args.telemetry_interval_s > 0 else None
    if telemetry is not None:
        telemetry.start()
    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(args.concurrency)))
    duration = time.perf_counter() - started
    power = telemetry.finish() if telemetry is not None else None
    delta, after = await metrics_delta(base, before, len(records))
    return {
        "concurrency": args.concurrency,
        "requests": records,
        "conversations_finished": finished,
        "duration_s": duration,
        "endpoint": path,
        "server_metrics_delta": delta,
        "server_metrics_error": before.get("error") or after.get("error"),
        "telemetry": power,
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--conversations", type=int, required=True)
    parser.add_argument("--turns", type=int, required=True)
    parser.add_argument("--concurrency", type=int, default=1, help="conversations in flight")
    parser.add_argument("--turn-input-tokens", type=int, default=64, help="tokens of each new user message")
    parser.add_argument("--turn-output-tokens", type=int, default=32, help="tokens of each answer")
    parser.add_argument("--think-time-s", type=float, default=0.0, help="between an answer and the next turn")
    parser.add_argument("--endpoint", choices=("completions", "chat"), default="completions")
    parser.add_argument("--sharegpt", help="a ShareGPT-format JSON file: its human turns are the user messages")
    parser.add_argument("--tokenizer", help="the model folder: chat messages are cut with its tokenizer")
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--telemetry-interval-s", type=float, default=0.0, help="power and clocks (0: not)")
    parser.add_argument("--progress-label", help="name the run in progress lines on stderr (none without it)")
    print(json.dumps(asyncio.run(run(parser.parse_args()))))


if __name__ == "__main__":
    main()
