"""The `analysis` unit's definition: the captured traces broken down by category per rank."""

from __future__ import annotations

import ast
import json
from pathlib import Path

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
    change to either re-runs it (the traces stay). The code is every module of ours the analyser
    imports, found by following its imports (not a list kept by hand, which missed modules split
    out later)."""
    import hashlib

    from tasks.analysis.breakdown import RULES_PATH

    code = b"".join(path.read_bytes() for path in analyser_modules())
    return {
        "rules": hashlib.sha256(RULES_PATH.read_bytes()).hexdigest()[:16],
        "code": hashlib.sha256(code).hexdigest()[:16],
    }


def analyser_modules() -> list[Path]:
    """tasks/analysis/breakdown.py and every module of this project it imports, transitively
    (imports inside functions included), sorted by path."""
    root = Path(__file__).resolve().parents[2]
    seen: set[Path] = set()
    todo = [Path(__file__).with_name("breakdown.py").resolve()]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
                if isinstance(node, ast.ImportFrom) and node.module and not node.level
                else []
            )
            for name in names:
                if name.split(".")[0] not in ("tasks", "orchestrator"):
                    continue
                base = root.joinpath(*name.split("."))
                found = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
                if found.is_file():
                    todo.append(found.resolve())
    return sorted(seen)


def _section(findings) -> str:  # tasks.view.Findings
    from tasks.analysis.section import breakdown_section

    return breakdown_section(findings)


UNIT = PhaseUnit(
    name="analysis",
    runs_on_variants=True,
    specs=_specs,
    results=(ANALYSIS_BREAKDOWN,),
    requires=("profile",),
    section=_section,
)
