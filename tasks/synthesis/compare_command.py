"""`orchestrate compare A B`: two campaigns side by side, each difference judged against the
noise both measured. A and B are todo files, report folders or baseline.json files."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from orchestrator.atomic import write_atomic
from orchestrator.cli import ExtraCommand
from orchestrator.errors import InputError
from tasks.synthesis.snapshot import comparison_document, load_snapshot


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "a", type=Path, help="campaign A: its state/todo.json, reports/<campaign> folder or baseline.json"
    )
    parser.add_argument("b", type=Path, help="campaign B, the same kinds")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where to write the Markdown comparison (default: <reports>/compare_<A>_vs_<B>.md)",
    )


def _run(args: argparse.Namespace) -> int:

    a, b = load_snapshot(args.a), load_snapshot(args.b)
    document = comparison_document(a, b)
    print(document)
    out = args.out or args.reports / f"compare_{_slug(a.campaign)}_vs_{_slug(b.campaign)}.md"
    if out.is_dir():
        raise InputError(f"{out}: is a folder; --out names the comparison's Markdown file")
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, document.encode(), shared=True)
    print(f"comparison written: {out}")
    return 0


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


COMPARE = ExtraCommand(
    help="compare two campaigns (todo files, report folders or baseline.json): each figure,"
    " the difference, and whether it is outside both campaigns' noise",
    arguments=_arguments,
    run=_run,
)
