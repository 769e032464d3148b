"""The analysis task: trace breakdown per rank, then the campaign's derived figures."""

from __future__ import annotations

import json
from typing import Any

from orchestrator.atomic import write_atomic
from orchestrator.campaign import TaskContext
from tasks.capture import trace_paths
from tasks.session import Session
from tasks.trace_analysis import analyze_ranks


def analysis_action(session: Session):
    def run(ctx: TaskContext) -> dict[str, Any]:
        manifest = ctx.result_of("profile_capture")
        analysis = analyze_ranks(trace_paths(manifest), workers=2)
        artifact = ctx.artifacts_dir / "breakdown.json"
        write_atomic(artifact, json.dumps(analysis, indent=1).encode())
        rank0 = analysis["ranks"][0]
        comm = rank0["categories"].get("communication", {})
        ctx.log(f"rank 0: {rank0['decode_steps']} decode steps, {rank0['device_ms_per_step']:.3f} ms"
                f" device work a step, communication {comm.get('share_pct', 0):.1f}%"
                f" ({comm.get('calls_per_step', 0):.0f} calls a step)")
        return {**analysis, "artifact": str(artifact)}

    return run
