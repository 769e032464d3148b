"""The closing sections: the decision record, the baseline, and the configuration the results
came from (as each todo recorded it, with any that a later config change made stale)."""

from __future__ import annotations

import json
from typing import Any

from orchestrator.atomic import write_atomic
from orchestrator.report import md_table
from orchestrator.results import stale_reason
from orchestrator.schema import Status
from tasks.synthesis.decisions import decide
from tasks.synthesis.figures import KeyFigures
from tasks.view import Findings, fmt


def decision_section(figures: KeyFigures) -> str:
    record = decide(figures.rule_inputs())
    return ("## Decision record\n\nRules: `tasks/synthesis/decision_rules.toml`. Options that compromise"
            " precision are rejected whatever they would buy.\n\n"
            + md_table(["option", "evidence", "decision", "reason"],
                       [[r["title"], r["evidence"] or "-", r["decision"], r["reason"]] for r in record]))


def baseline_section(figures: KeyFigures, findings: Findings) -> str:
    rank0 = figures.rank0
    comm = rank0.categories.get("communication") if rank0 else None
    rules = figures.rule_inputs()
    baseline = {
        "single_stream_tpot_ms": figures.decode_tpot_ms,
        "decode_device_ms_per_step_rank0": rank0.device_ms_per_step if rank0 else None,
        "decode_wall_ms_per_step_rank0": rank0.wall_ms_per_step if rank0 else None,
        **{key: value for key, value in rules.items() if key.endswith("_share_pct")},
        "communication_calls_per_step_rank0": comm.calls_per_step if comm else None,
    }
    write_atomic(findings.folder / "baseline.json", json.dumps(baseline, indent=1).encode())
    return ("## Baseline\n\nWhat a later campaign compares against (also in [baseline.json](baseline.json)):\n\n"
            + md_table(["figure", "value"], [[k, fmt(v, 3)] for k, v in baseline.items()]))


def configuration_section(findings: Findings) -> str:
    """The config parts each result came from, merged, and the todos a later edit made stale."""
    recorded: dict[str, Any] = {}
    for todo in findings.state.todos:
        for section, values in (todo.inputs or {}).items():
            if isinstance(values, dict):
                recorded.setdefault(section, {}).update(values)
            else:
                recorded[section] = values
    stale = []
    for todo in findings.state.todos:
        spec = findings.specs.get(todo.id)
        if spec is not None and todo.status == Status.completed:
            reason = stale_reason(todo, spec, findings.state)
            if reason:
                stale.append([todo.id, reason])
    text = ("## How to reproduce\n\n```\n./dev orchestrate resume            # this campaign, from its todo file\n"
            "./dev orchestrate reset TASK        # redo one task and what depends on it\n"
            "./dev orchestrate report            # regenerate this document\n```\n\n"
            f"Campaign `{findings.state.campaign}`. The configuration the results came from, as each todo"
            " recorded its inputs (environment values as digests):\n\n```json\n"
            + json.dumps(recorded, indent=1, sort_keys=True) + "\n```\n")
    if stale:
        text += ("\n**Stale results**: the config changed since these ran; `orchestrate resume` runs them"
                 " again with their dependents:\n\n" + md_table(["todo", "why"], stale))
    return text
