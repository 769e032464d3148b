"""The `macro_replay` todo: a trace's arrivals replayed against the server at their own pace
(tasks/macro/traces.py reads them), each request with the trace's prompt and reply lengths; the
achieved arrival rate and each send's lateness set beside the trace's."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from orchestrator.atomic import write_atomic
from orchestrator.campaign import TaskContext
from tasks.host_json import run_json_script
from tasks.macro.action import LOADGEN_SCRIPT, load_args, require_live_server
from tasks.macro.metrics import distribution_ms, summarize
from tasks.macro.results import LevelSummary, MacroReplay
from tasks.macro.traces import read_trace
from tasks.service.launch import service_pid_path
from tasks.session import Session


def trace_digest(path: str | None) -> str | None:
    """The trace file's content digest: a todo's input, so an edited trace is replayed again."""
    if not path or not Path(path).is_file():
        return None
    return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def replay_action(session: Session):
    def run(ctx: TaskContext) -> MacroReplay:
        cfg = session.config.macro
        trace = read_trace(Path(cfg.trace or ""), cfg.trace_speed, cfg.trace_duration_s)
        rows = [[a.offset_s, a.input_tokens, a.output_tokens] for a in trace.arrivals]
        schedule = ctx.artifacts_dir / "schedule_macro_replay.json"
        write_atomic(schedule, json.dumps(rows).encode())
        args = load_args(session, ctx, cfg.input_tokens, cfg.output_tokens) + [
            "--concurrency",
            str(cfg.rate_max_concurrency),
            "--requests",
            str(len(rows)),
            "--warmup",
            "0",
            "--seed",
            "7",
            "--schedule",
            session.ship(schedule),
            "--request-rate",
            repr(trace.rate_per_s or 1.0),
            "--server-pid-file",
            service_pid_path(session),
            "--progress-label",
            "replay",
        ]
        raw = run_json_script(session, LOADGEN_SCRIPT, args, timeout_s=trace.span_s + 900, progress=ctx.progress)
        artifact = ctx.artifacts_dir / "requests_replay.json"
        write_atomic(artifact, json.dumps(raw).encode())
        summary = summarize(raw)
        require_live_server(session, summary["failed"], summary["requests"], summary["failure_examples"], "replay")
        late = [
            r["sent_s"] - r["due_s"]
            for r in raw["requests"]
            if r.get("sent_s") is not None and r.get("due_s") is not None
        ]
        result = MacroReplay(
            level=LevelSummary.model_validate({**summary, "artifact": str(artifact)}),
            trace=trace.path,
            format=trace.format,
            arrivals=len(rows),
            span_s=trace.span_s,
            speed=cfg.trace_speed,
            trace_rate_per_s=trace.rate_per_s,
            achieved_rate_per_s=summary.get("achieved_request_rate"),
            lateness_ms=distribution_ms(late),
            shared_block_pct=trace.shared_block_pct,
        )
        ctx.log(
            f"replay: {len(rows)} arrivals over {trace.span_s:.1f} s, trace rate"
            f" {trace.rate_per_s or 0:.2f}/s, achieved {result.achieved_rate_per_s or 0:.2f}/s,"
            f" lateness p99 {result.lateness_ms.p99 or 0:.1f} ms"
        )
        return result

    return run
