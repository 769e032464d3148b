"""Phase 1: what users feel. Single-stream TPOT, then a concurrency sweep, client and server views."""

from __future__ import annotations

import json
from typing import Any

from orchestrator.atomic import write_atomic
from orchestrator.campaign import TaskContext
from tasks.hostjson import run_json_script
from tasks.metrics import DEFINITIONS, summarize
from tasks.service import served_name, service_pid_path
from tasks.session import Session


def model_vocab(ctx: TaskContext) -> int:
    config_path = ctx.result_of("model_config").get("config_artifact")
    with open(config_path) as handle:
        return int(json.load(handle).get("vocab_size", 32000))


def run_load(session: Session, ctx: TaskContext, concurrency: int, requests: int, warmup: int,
             seed: int) -> dict[str, Any]:
    cfg = session.config.macro
    args = ["--port", str(session.config.service.port), "--model", served_name(session),
            "--input-tokens", str(cfg.input_tokens), "--output-tokens", str(cfg.output_tokens),
            "--concurrency", str(concurrency), "--requests", str(requests),
            "--warmup", str(warmup), "--vocab", str(model_vocab(ctx)), "--seed", str(seed),
            "--server-pid-file", service_pid_path(session)]
    raw = run_json_script(session, "loadgen.py", args, timeout_s=3600)
    artifact = ctx.artifacts_dir / f"requests_c{concurrency}.json"
    write_atomic(artifact, json.dumps(raw).encode())
    summary = summarize(raw)
    summary["artifact"] = str(artifact)
    return summary


def macro_single_action(session: Session):
    def run(ctx: TaskContext) -> dict[str, Any]:
        cfg = session.config.macro
        summary = run_load(session, ctx, 1, cfg.single_stream_requests, cfg.warmup_requests, seed=1)
        ctx.log(f"single stream: TPOT mean {summary['tpot_ms'].get('mean', float('nan')):.2f} ms,"
                f" TTFT mean {summary['ttft_ms'].get('mean', float('nan')):.1f} ms")
        return {"single_stream": summary, "definitions": DEFINITIONS,
                "input_tokens": cfg.input_tokens, "output_tokens": cfg.output_tokens}

    return run


def concurrency_levels(maximum: int) -> list[int]:
    levels, level = [], 1
    while level < maximum:
        levels.append(level)
        level *= 2
    return levels + [maximum]


def macro_sweep_action(session: Session):
    def run(ctx: TaskContext) -> dict[str, Any]:
        cfg = session.config.macro
        levels = []
        for concurrency in concurrency_levels(cfg.concurrency_max):
            requests = max(cfg.requests_per_level, 2 * concurrency)
            summary = run_load(session, ctx, concurrency, requests, warmup=1 if not levels else 0,
                               seed=100 + concurrency)
            ctx.log(f"c={concurrency}: {summary['output_throughput_tok_per_s']:.1f} tok/s,"
                    f" TPOT p50 {summary['tpot_ms'].get('p50', float('nan')):.2f} ms,"
                    f" failed {summary['failed']}")
            levels.append(summary)
        return {"levels": levels, "definitions": DEFINITIONS,
                "input_tokens": cfg.input_tokens, "output_tokens": cfg.output_tokens}

    return run
