"""`orchestrate analyze PATH...`: the step breakdown of any torch.profiler traces, outside a
campaign (yesterday's capture, a colleague's, another engine's), the same figures a campaign
stores. Files or folders, gzipped or not; each file's rank from its `distributedInfo`, else its
name (`rank3...`), else its order."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from orchestrator.atomic import write_atomic
from orchestrator.cli import ExtraCommand
from orchestrator.errors import InputError

RULES_PATH_TEXT = "tasks/analysis/rules.toml"

TRACE_SUFFIXES = (".json", ".json.gz")


def trace_files(paths: list[Path]) -> list[Path]:
    """The trace files the arguments name: files as given, folders searched for *.json(.gz)."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            inside = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(TRACE_SUFFIXES))
            if not inside:
                raise InputError(f"{path}: no *.json or *.json.gz trace files in this folder; name the traces")
            found += inside
        elif path.is_file():
            found.append(path)
        else:
            raise InputError(f"{path}: no such file or folder; name trace files or a folder holding them")
    return found


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", type=Path, nargs="+", help="trace files (.json or .json.gz) or folders of them")
    parser.add_argument("--json", action="store_true", help="print the breakdown as the campaign stores it")
    parser.add_argument("--out", type=Path, help="write analysis.md, breakdown.json and breakdown.png there")
    parser.add_argument(
        "--step-marker",
        default="auto",
        help="what marks a step: auto (default: the first of vllm, sglang and profiler-step"
        " found), vllm (execute_context_N(...)_generation_M(...)), sglang (step[DECODE"
        " bs=32]), profiler-step (ProfilerStep#N), or a regular expression over annotation"
        " names, e.g. '^decode_step_\\d+$' (a group named 'kind' saying"
        " decode/prefill/mixed gives the step's kind)",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="exit 2 when a kernel family no rule matches takes over 2%% of a step's device time",
    )
    parser.add_argument("--rules", type=Path, help="kernel category rules (default: tasks/analysis/rules.toml)")
    parser.add_argument("--workers", type=int, default=2, help="traces analysed at once (default 2)")


def _run(args: argparse.Namespace) -> int:
    from tasks.analysis.breakdown import RULES_PATH, analyze_ranks
    from tasks.analysis.results import Breakdown
    from tasks.analysis.trace_reader import RANK_IN_NAME

    files = trace_files(args.paths)
    by_rank: dict[int, Path] = {}
    for index, path in enumerate(files):
        match = RANK_IN_NAME.search(path.name)
        rank = int(match[1]) if match and int(match[1]) not in by_rank else index
        while rank in by_rank:
            rank += len(files)
        by_rank[rank] = path
    out = args.out
    if out is not None and out.exists() and not out.is_dir():
        raise InputError(f"{out}: is a file; --out names a folder for analysis.md and the plot")
    artifact = out / "breakdown.json" if out else Path("-")
    analysis = Breakdown.model_validate(
        {
            **analyze_ranks(by_rank, args.rules or RULES_PATH, max(1, args.workers), args.step_marker),
            "artifact": str(artifact),
        }
    )
    document = analysis.model_dump(mode="json")
    if args.json:
        print(json.dumps(document, indent=1))
    else:
        _print_table(analysis, str(args.rules or RULES_PATH_TEXT))
    if out is not None:
        _write(out, analysis, document)
        if not args.json:
            print(f"written: {out / 'analysis.md'}, {out / 'breakdown.json'}, {out / 'breakdown.png'}")
    uncovered = [(rank.rank, u) for rank in analysis.ranks for u in rank.uncategorised]
    if args.strict and uncovered:
        rules = args.rules or RULES_PATH
        raise InputError(
            f"{rules}: no rule matches "
            + "; ".join(f"`{u.family}` ({u.share_pct:.1f}% of rank {rank}'s device time)" for rank, u in uncovered[:5])
            + "; add a [[rule]] for it (or drop --strict)"
        )
    return 0


def _print_table(analysis, rules: str) -> None:  # tasks.analysis.results.Breakdown
    from rich.console import Console
    from rich.table import Table

    from tasks.analysis.section import STEP_WORDS

    console = Console(width=160)
    table = Table(title="ms a step (share %) by category")
    table.add_column("category")
    for rank in analysis.ranks:
        table.add_column(f"rank {rank.rank}", justify="right")
    for category in analysis.ranks[0].categories:
        table.add_row(
            category,
            *(
                f"{r.categories[category].ms_per_step:.3f} ({r.categories[category].share_pct:.1f})"
                if category in r.categories
                else "-"
                for r in analysis.ranks
            ),
        )
    table.add_row("steps", *(f"{r.decode_steps} {STEP_WORDS.get(r.steps_kind, r.steps_kind)}" for r in analysis.ranks))
    table.add_row("device ms a step", *(f"{r.device_ms_per_step:.3f}" for r in analysis.ranks))
    table.add_row("wall ms a step", *(f"{r.wall_ms_per_step:.3f}" for r in analysis.ranks))
    if any(r.between_steps and r.between_steps.device_ms_per_step for r in analysis.ranks):
        # vLLM 0.26 runs a dense model's lm_head and sampler between two step annotations: its
        # own row, and the step with it, so dense and MoE models read like for like.
        table.add_row(
            "+ between steps",
            *(f"{r.between_steps.device_ms_per_step:.3f}" if r.between_steps else "-" for r in analysis.ranks),
        )
        table.add_row(
            "device ms incl. between",
            *(
                f"{r.device_ms_per_step + (r.between_steps.device_ms_per_step if r.between_steps else 0):.3f}"
                for r in analysis.ranks
            ),
        )
    console.print(table)
    from rich.markup import escape

    from tasks.analysis.section import input_notes

    for rank in analysis.ranks:
        outside = rank.device_outside_steps_pct
        console.print(
            escape(
                f"rank {rank.rank}: {Path(rank.trace).name}"
                + (f"; {outside:.1f}% of its device time is outside the step windows" if outside else "")
                + (f" — note: {rank.note}" if rank.note else "")
            ),
            highlight=False,
        )
    for line in input_notes(analysis, rules):
        # Escaped: the text holds `[[rule]]`, which rich would read as markup ("add a [] for it").
        bold = escape(line).replace("**", "[bold]", 1).replace("**", "[/bold]", 1)
        console.print(bold, highlight=False)
    imbalance = analysis.imbalance
    console.print(
        f"imbalance: device work a step {imbalance.device_ms_per_step_min:.3f} to"
        f" {imbalance.device_ms_per_step_max:.3f} ms; communication share by rank "
        + ", ".join(f"{v:.1f}%" for v in imbalance.communication_share_pct_by_rank)
    )


def _write(out: Path, analysis, document: dict) -> None:
    import os

    from tasks.analysis.section import breakdown_figure, imbalance_text, rank_section
    from tasks.view import figure_png

    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "breakdown.json", json.dumps(document, indent=1).encode(), shared=True)
    text = (
        "# Trace analysis\n\nStep breakdown by category (rules: `tasks/analysis/rules.toml`); device work"
        " is every kernel/memcpy/memset on GPU traces, every rule-matched outermost CPU op on CPU traces.\n\n"
    )
    for rank in analysis.ranks:
        text += rank_section(rank, f"[{Path(rank.trace).name}]({os.path.relpath(rank.trace, out)})")
    write_atomic(out / "breakdown.png", figure_png(breakdown_figure(analysis)), shared=True)
    text += imbalance_text(analysis) + "\n![breakdown](breakdown.png)\n"
    write_atomic(out / "analysis.md", text.encode(), shared=True)


ANALYZE = ExtraCommand(
    help="break down torch.profiler traces (files or folders, any layout) by category per"
    " rank, outside a campaign; --json for the stored structure, --out DIR for Markdown"
    " and a plot",
    arguments=_arguments,
    run=_run,
)
