"""The `macro` phase's work: single-stream TPOT, then a concurrency sweep, client and server views."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from orchestrator.atomic import write_atomic
from orchestrator.campaign import TaskContext
from orchestrator.errors import TaskFailed, tail_lines
from tasks.host_json import run_json_script
from tasks.macro.config import concurrency_levels
from tasks.macro.metrics import summarize
from tasks.macro.noise import agrees, merge_runs, outliers, repeat_run, spread
from tasks.macro.results import LevelSummary, MacroRates, MacroSingle, MacroSweep, Noise, RepeatRun, RequestTokens
from tasks.model.results import MODEL_FACTS
from tasks.service.launch import served_name, service_log_path, service_pid_path
from tasks.session import Session

LOADGEN_SCRIPT = Path(__file__).parent / "remote" / "loadgen.py"


def load_args(session: Session, ctx: TaskContext, input_tokens: int, output_tokens: int) -> list[str]:
    """The load client's options shared by the benchmarks and the capture."""
    model = ctx.input(MODEL_FACTS)
    cfg = session.config.macro
    args = [
        "--port",
        str(session.config.service.port),
        "--model",
        served_name(session),
        "--input-tokens",
        str(input_tokens),
        "--output-tokens",
        str(output_tokens),
        "--vocab",
        str(model.prompt_vocab),
        "--endpoint",
        cfg.endpoint,
        "--dataset",
        cfg.dataset,
        "--tokenizer",
        model.model,
    ]
    args += ["--shared-prefix", str(cfg.shared_prefix_tokens)] if cfg.shared_prefix_tokens else []
    args += ["--telemetry-interval-s", repr(cfg.telemetry_interval_s)] if cfg.telemetry_interval_s else []
    return args + (["--dataset-path", cfg.dataset_path] if cfg.dataset_path else [])


def run_load(
    session: Session,
    ctx: TaskContext,
    concurrency: int,
    requests: int,
    warmup: int,
    seed: int,
    rate: float | None = None,
    repeats: int | None = None,
    token_ids: bool = False,
) -> LevelSummary:
    """A level: `macro.repeats` runs (the warmup before the first only, fresh prompts in each),
    an outlier run measured again, the kept runs' requests pooled into the level's figures."""
    cfg = session.config.macro
    raws: list[dict] = []
    runs: list[RepeatRun] = []
    for index in range(repeats or cfg.repeats):
        raw, run = _one_run(
            session,
            ctx,
            concurrency,
            requests,
            warmup if index == 0 else 0,
            seed + 1000 * index,
            f"{_label(concurrency, rate)}_r{index + 1}",
            rate,
            token_ids,
        )
        raws.append(raw)
        runs.append(run)
    discarded: list[RepeatRun] = []
    notes: list[str] = []
    for index in outliers([r.tpot_ms_mean for r in runs], cfg.outlier_pct):  # 3 runs or more
        first = runs[index]
        raw, again = _one_run(
            session,
            ctx,
            concurrency,
            requests,
            0,
            seed + 1000 * (cfg.repeats + index),
            f"{_label(concurrency, rate)}_r{index + 1}_again",
            rate,
        )
        others = [r.tpot_ms_mean for i, r in enumerate(runs) if i != index]
        raws[index], runs[index] = raw, again
        if agrees(again.tpot_ms_mean, others, cfg.outlier_pct):
            discarded.append(first)
            notes.append(
                f"run {index + 1} (mean TPOT {_ms(first.tpot_ms_mean)} ms) was more than"
                f" {cfg.outlier_pct:g}% from the median; measured again: {_ms(again.tpot_ms_mean)} ms,"
                " in line with the others, so the first is left out"
            )
        else:
            notes.append(
                f"flagged: run {index + 1} stayed more than {cfg.outlier_pct:g}% from the other runs'"
                f" median when measured again ({_ms(first.tpot_ms_mean)}, then {_ms(again.tpot_ms_mean)}"
                f" ms, against {_ms(statistics.median(v for v in others if v is not None))} ms); kept"
            )
        ctx.log(f"{_label(concurrency, rate)}: {notes[-1]}")
    merged = merge_runs(raws)
    artifact = ctx.artifacts_dir / f"requests_{_label(concurrency, rate)}.json"
    write_atomic(artifact, json.dumps(merged).encode())
    noise = Noise(
        runs=runs,
        discarded=discarded,
        notes=notes,
        tpot_ms_mean=spread([r.tpot_ms_mean for r in runs]),
        ttft_ms_mean=spread([r.ttft_ms_mean for r in runs]),
        output_throughput_tok_per_s=spread([r.output_throughput_tok_per_s for r in runs]),
    )
    achieved = [r.achieved_request_rate for r in runs if r.achieved_request_rate is not None]
    return LevelSummary.model_validate(
        {
            **summarize(merged),
            "artifact": str(artifact),
            "noise": noise,
            "achieved_request_rate": statistics.median(achieved) if achieved else None,
        }
    )


def _label(concurrency: int, rate: float | None) -> str:
    return f"rate{rate:g}" if rate else f"c{concurrency}"


def _one_run(
    session: Session,
    ctx: TaskContext,
    concurrency: int,
    requests: int,
    warmup: int,
    seed: int,
    name: str,
    rate: float | None = None,
    token_ids: bool = False,
) -> tuple[dict, RepeatRun]:
    cfg = session.config.macro
    args = load_args(session, ctx, cfg.input_tokens, cfg.output_tokens) + [
        "--concurrency",
        str(concurrency),
        "--requests",
        str(requests),
        "--warmup",
        str(warmup),
        "--seed",
        str(seed),
        "--server-pid-file",
        service_pid_path(session),
        "--progress-label",
        name,
    ]
    if rate:
        args += ["--request-rate", repr(rate), "--burstiness", repr(cfg.burstiness)]
    if token_ids:
        args.append("--token-ids")
    raw = run_json_script(session, LOADGEN_SCRIPT, args, timeout_s=3600, progress=ctx.progress)
    artifact = ctx.artifacts_dir / f"requests_{name}.json"
    write_atomic(artifact, json.dumps(raw).encode())
    summary = summarize(raw)
    require_live_server(
        session, summary["failed"], summary["requests"], summary["failure_examples"], f"c={concurrency}"
    )
    return raw, repeat_run(summary, str(artifact), seed)


def require_live_server(session: Session, failed: int, requests: int, examples: list[str], run: str) -> None:
    """Failed requests are no benchmark. From a server that no longer answers, the task fails
    with the server's last log lines (`resume` relaunches it and runs the level again); from a
    live server, more than `macro.max_failed_pct` fails it too, and fewer are flagged in bold."""
    if not failed:
        return
    first = (examples or ["?"])[0][:200]
    host = session.host()
    status, _ = host.http_get(session.config.service.port, "/health", timeout_s=5)
    if status != 200 and session.multi_node:
        from tasks.service.node_deaths import fail_if_node_died

        fail_if_node_died(session, f"during the {run} run ({failed} of {requests} requests failed; first: {first})")
    if status != 200:
        log = service_log_path(session)
        tail = (
            tail_lines(host.read_text(log, 200_000), 30)
            if host.run(["test", "-f", log], check=False, timeout_s=30).exit_code == 0
            else ""
        )
        raise TaskFailed(
            f"the vLLM server stopped answering during the {run} run ({failed} of {requests}"
            f" requests failed; first: {first}); `orchestrate resume` relaunches it and runs"
            " this again",
            output_tail=tail,
        )
    limit = session.config.macro.max_failed_pct
    if failed / requests * 100 > limit:
        raise TaskFailed(
            f"{failed} of {requests} requests failed in the {run} run (over macro.max_failed_pct"
            f" = {limit}%) while the server answered; first: {first}"
        )


def single_stream(session: Session):
    def run(ctx: TaskContext) -> MacroSingle:
        cfg = session.config.macro
        summary = run_load(session, ctx, 1, cfg.single_stream_requests, cfg.warmup_requests, seed=1, token_ids=True)
        ctx.log(f"single stream: TPOT mean {_ms(summary.tpot_ms.mean)} ms, TTFT mean {_ms(summary.ttft_ms.mean)} ms")
        return MacroSingle(
            single_stream=summary,
            input_tokens=cfg.input_tokens,
            output_tokens=cfg.output_tokens,
            token_ids=kept_token_ids(summary.artifact),
        )

    return run


KEPT_REQUESTS = 16
"""Requests whose token ids the result keeps (the n-gram drafter is replayed over them): enough
for a stable acceptance figure, few enough to keep the todo file small."""


def kept_token_ids(artifact: str | None) -> list[RequestTokens] | None:
    """The prompt and output token ids of the first requests of a level's runs, where the server
    returned them (vLLM's `return_token_ids`); None where it did not."""
    if not artifact:
        return None
    records = json.loads(Path(artifact).read_text()).get("requests", [])
    kept = [
        RequestTokens(prompt=r["prompt_ids"], output=r["output_ids"])
        for r in records
        if not r.get("error") and r.get("prompt_ids") and r.get("output_ids")
    ]
    return kept[:KEPT_REQUESTS] or None


def sweep(session: Session):
    def run(ctx: TaskContext) -> MacroSweep:
        cfg = session.config.macro
        levels: list[LevelSummary] = []
        for concurrency in concurrency_levels(cfg.concurrency_max):
            requests = max(cfg.requests_per_level, 2 * concurrency)
            summary = run_load(
                session, ctx, concurrency, requests, warmup=1 if not levels else 0, seed=100 + concurrency
            )
            ctx.log(
                f"c={concurrency}: {_ms(summary.output_throughput_tok_per_s)} tok/s,"
                f" TPOT p50 {_ms(summary.tpot_ms.p50)} ms, failed {summary.failed}"
            )
            levels.append(summary)
        return MacroSweep(levels=levels, input_tokens=cfg.input_tokens, output_tokens=cfg.output_tokens)

    return run


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def rate_sweep(session: Session):
    """Open-loop levels: each of `macro.request_rates`, arrivals with `macro.burstiness`, at most
    `macro.rate_max_concurrency` in flight."""

    def run(ctx: TaskContext) -> MacroRates:
        cfg = session.config.macro
        levels = []
        for rate in cfg.request_rates:
            requests = max(cfg.requests_per_level, 2)
            level = run_load(
                session,
                ctx,
                cfg.rate_max_concurrency,
                requests,
                warmup=1 if not levels else 0,
                seed=500 + len(levels),
                rate=rate,
            )
            ctx.log(
                f"{rate:g} requests/s asked, {_ms(level.achieved_request_rate)} sent: TTFT p50"
                f" {_ms(level.ttft_ms.p50)} ms, TPOT mean {_ms(level.tpot_ms.mean)} ms"
            )
            levels.append(level)
        return MacroRates(levels=levels, input_tokens=cfg.input_tokens, output_tokens=cfg.output_tokens)

    return run
