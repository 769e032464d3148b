"""The `macro_conversations` todo: multi-turn conversations against the server (the host script
remote/loadgen_conversations.py runs them), summed up by turn number: turn 1 pays for its whole
prompt, later turns may find their history in the prefix cache."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator.atomic import write_atomic
from orchestrator.campaign import TaskContext
from tasks.host_json import run_json_script
from tasks.macro.action import require_live_server
from tasks.macro.metrics import distribution_ms, summarize, tpot_s
from tasks.macro.results import LevelSummary, MacroConversations, TurnFigures
from tasks.model.results import MODEL_FACTS
from tasks.service.launch import served_name
from tasks.session import Session

CONVERSATION_SCRIPT = Path(__file__).parent / "remote" / "loadgen_conversations.py"


def by_turn(records: list[dict[str, Any]], turns: int) -> list[TurnFigures]:
    """Each turn number's requests: latencies of the completed ones, and the share of their prompt
    tokens the server said it served from its prefix cache (None where no response said)."""
    figures = []
    for turn in range(1, turns + 1):
        mine = [r for r in records if r.get("turn") == turn]
        ok = [r for r in mine if not r.get("error") and r.get("ttft_s") is not None]
        prompts = [r["prompt_tokens"] for r in ok if r.get("prompt_tokens") is not None]
        told = [r for r in ok if r.get("cached_tokens") is not None and r.get("prompt_tokens")]
        cached = sum(r["cached_tokens"] for r in told) / sum(r["prompt_tokens"] for r in told) * 100 if told else None
        figures.append(
            TurnFigures(
                turn=turn,
                requests=len(mine),
                completed=len(ok),
                prompt_tokens_mean=sum(prompts) / len(prompts) if prompts else None,
                cached_pct=cached,
                ttft_ms=distribution_ms([r["ttft_s"] for r in ok]),
                tpot_ms=distribution_ms([t for r in ok if (t := tpot_s(r)) is not None]),
            )
        )
    return figures


def conversations_action(session: Session):
    def run(ctx: TaskContext) -> MacroConversations:
        cfg = session.config.macro
        model = ctx.input(MODEL_FACTS)
        args = [
            "--port",
            str(session.config.service.port),
            "--model",
            served_name(session),
            "--conversations",
            str(cfg.conversations),
            "--turns",
            str(cfg.conversation_turns),
            "--concurrency",
            str(cfg.conversation_concurrency),
            "--turn-input-tokens",
            str(cfg.turn_input_tokens),
            "--turn-output-tokens",
            str(cfg.turn_output_tokens),
            "--think-time-s",
            repr(cfg.think_time_s),
            "--endpoint",
            cfg.endpoint,
            "--vocab",
            str(model.prompt_vocab),
            "--tokenizer",
            model.model,
            "--seed",
            "11",
            "--progress-label",
            "conversations",
        ]
        args += ["--sharegpt", cfg.conversations_path] if cfg.conversations_path else []
        args += ["--telemetry-interval-s", repr(cfg.telemetry_interval_s)] if cfg.telemetry_interval_s else []
        turns = cfg.conversations * cfg.conversation_turns
        raw = run_json_script(
            session,
            CONVERSATION_SCRIPT,
            args,
            timeout_s=900 + turns * (cfg.think_time_s + 60) / cfg.conversation_concurrency,
            progress=ctx.progress,
        )
        artifact = ctx.artifacts_dir / "requests_conversations.json"
        write_atomic(artifact, json.dumps(raw).encode())
        summary = summarize(raw)
        require_live_server(
            session, summary["failed"], summary["requests"], summary["failure_examples"], "conversations"
        )
        finished = len(raw.get("conversations_finished") or [])
        duration = raw["duration_s"]
        result = MacroConversations(
            level=LevelSummary.model_validate({**summary, "artifact": str(artifact)}),
            source=Path(cfg.conversations_path).name if cfg.conversations_path else "generated",
            conversations=cfg.conversations,
            finished=finished,
            turns=cfg.conversation_turns,
            concurrency=cfg.conversation_concurrency,
            think_time_s=cfg.think_time_s,
            conversations_per_s=finished / duration if duration > 0 else None,
            by_turn=by_turn(raw["requests"], cfg.conversation_turns),
        )
        first, last = result.by_turn[0], result.by_turn[-1]
        ctx.log(
            f"conversations: {finished} of {cfg.conversations} finished, {result.conversations_per_s or 0:.3f}/s;"
            f" TTFT p50 turn 1 {first.ttft_ms.p50 or 0:.1f} ms, turn {last.turn} {last.ttft_ms.p50 or 0:.1f} ms;"
            f" prefix cache served {last.cached_pct or 0:.1f}% of turn {last.turn}'s prompt tokens"
        )
        return result

    return run
