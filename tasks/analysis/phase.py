"""The `analysis` unit's definition: the captured traces broken down by category per rank."""

from __future__ import annotations

import json

from orchestrator.atomic import write_atomic
from orchestrator.campaign import TaskContext, TaskSpec
from tasks.analysis.categories import Category
from tasks.analysis.results import ANALYSIS_BREAKDOWN, Breakdown
from tasks.profile.results import PROFILE_CAPTURE
from tasks.session import Session
from tasks.unit import PhaseUnit


def _specs(session: Session, enabled: frozenset[str]) -> list[TaskSpec]:

    def run(ctx: TaskContext) -> Breakdown:
        from tasks.analysis.breakdown import analyze_ranks

        manifest = ctx.input(PROFILE_CAPTURE)
        artifact = ctx.artifacts_dir / "breakdown.json"
        nodes = (
            {rank: manifest.node_names.get(str(index), f"node {index}") for rank, index in manifest.nodes.items()}
            if manifest.node_names
            else {}
        )
        analysis = Breakdown.model_validate(
            {**analyze_ranks(manifest.trace_paths(), workers=2), "artifact": str(artifact), "nodes": nodes}
        )
        write_atomic(artifact, json.dumps(analysis.model_dump(mode="json"), indent=1).encode())
        rank0 = analysis.ranks[0]
        comm = rank0.categories.get(Category.COMMUNICATION)
        ctx.log(
            f"rank 0: {rank0.decode_steps} decode steps, {rank0.device_ms_per_step:.3f} ms"
            f" device work a step, communication {comm.share_pct if comm else 0:.1f}%"
            f" ({comm.calls_per_step if comm else 0:.0f} calls a step)"
        )
        return analysis

    return [
        TaskSpec(
            ANALYSIS_BREAKDOWN,
            "Break decode time down by category from the traces",
            "analysis",
            run,
            depends_on=(PROFILE_CAPTURE,),
            inputs={"analysis": _analyzer_digests()},
        )
    ]


def _analyzer_digests() -> dict[str, str]:
    """The rules and the analyser's code decide every figure, and the analysis is cheap: a
    change to either re-runs it (the traces stay)."""
    import hashlib
    from pathlib import Path

    from tasks.analysis.breakdown import RULES_PATH

    code = b"".join(
        (Path(__file__).parent / name).read_bytes()
        for name in ("breakdown.py", "trace_reader.py", "trace_events.py", "step_markers.py")
    )
    return {
        "rules": hashlib.sha256(RULES_PATH.read_bytes()).hexdigest()[:16],
        "code": hashlib.sha256(code).hexdigest()[:16],
    }


def _section(findings) -> str:  # noqa: ANN001 - tasks.findings.Findings
    from tasks.analysis.section import breakdown_section

    return breakdown_section(findings)


UNIT = PhaseUnit(name="analysis", specs=_specs, results=(ANALYSIS_BREAKDOWN,), requires=("profile",), section=_section)
