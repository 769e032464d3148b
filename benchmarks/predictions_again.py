"""A campaign's predictions made again by today's rules, from its stored measurements, beside
what its experiments realised: every option an experiment checked, at every level both served.

usage: python benchmarks/predictions_again.py TODO_JSON[.gz] [CAMPAIGN_TOML] [--ledger LEDGER_JSON]
  (no CAMPAIGN_TOML: the embedded default's configuration, as `./dev orchestrate resume` ran it)

The todo file keeps what the campaign measured before any experiment (the micros, the trace's
breakdown, the single-stream outputs the drafter is replayed over) and what each experiment's
variant served. The decision record is computed again from those (nothing is re-run, nothing is
written); without --ledger no earlier record stands in for an assumption, as in a campaign from a
clean work folder. Prints the table, then the median |predicted - realised| / |realised| at the
capture's level and over every level, and how many signs are wrong outside the realised interval.
A rules change judged here on the run that motivated it is judged in-sample: say so.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import statistics
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.statefile import load_state  # noqa: E402
from tasks.config import EMBEDDED_DEFAULT, config_model  # noqa: E402
from tasks.decisions.ledger import share_of_tpot  # noqa: E402
from tasks.decisions.record import make_record  # noqa: E402
from tasks.decisions.rules import campaign_rules  # noqa: E402
from tasks.decisions.vocabulary import provenance  # noqa: E402
from tasks.experiments.levels_section import level_miss_line, misses  # noqa: E402
from tasks.experiments.plan import experiments_run  # noqa: E402
from tasks.experiments.results import DecisionRecord  # noqa: E402
from tasks.experiments.verify import Realised, verify  # noqa: E402
from tasks.registry import UNITS  # noqa: E402
from tasks.session import Session  # noqa: E402
from tasks.view import Findings  # noqa: E402


@dataclass
class Row:
    experiment: str
    concurrency: int
    predicted_ms: float | None
    realised: Realised
    inputs: str
    """The inputs of the prediction no measurement of this campaign holds, with where they came from."""
    why: str = ""
    """At a missed level other than the capture's: each input at the value that alone gives the realised
    change, and the one responsible (tasks/experiments/levels_section.py)."""

    @property
    def error(self) -> float | None:
        if self.predicted_ms is None or not self.realised.delta_ms:
            return None
        return abs(self.predicted_ms - self.realised.delta_ms) / abs(self.realised.delta_ms)

    @property
    def error_of_tpot(self) -> float | None:
        """|predicted - realised| over the base's TPOT at the level: a miss's size beside the step, where
        the relative error of a change near zero (W4A16 at c=1 on the MoE: +0.009 ms) says little."""
        return share_of_tpot(self.predicted_ms, self.realised.delta_ms, self.realised.base_ms)

    @property
    def wrong_sign(self) -> bool:
        """Predicted one way, realised the other, with the realised interval clear of zero."""
        real = self.realised
        if self.predicted_ms is None or not real.delta_ms or real.low_ms is None or real.high_ms is None:
            return False
        return not (real.low_ms <= 0 <= real.high_ms) and self.predicted_ms * real.delta_ms < 0


def predictions_again(
    todo: Path, config_file: Path | None, ledger: Path | None = None
) -> tuple[DecisionRecord, list[Row]]:
    """The decision record computed again by today's rules from the todo file's measurements, and
    every experiment's levels checked against it."""
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        state = work / "todo.json"
        opener = gzip.open if todo.name.endswith(".gz") else open
        with opener(todo, "rb") as source, state.open("wb") as copy:
            shutil.copyfileobj(source, copy)
        reports = work / "reports"
        reports.mkdir()
        if ledger:
            shutil.copy(ledger, reports / "ledger.json")
        document = tomllib.loads(config_file.read_text()) if config_file else EMBEDDED_DEFAULT
        config = config_model(UNITS).model_validate(document)
        session = Session(config=config, state_path=state, reports_dir=reports, host_factory=lambda: None)
        findings = Findings(session, load_state(state), reports)
        record = make_record(findings)
        rules = campaign_rules(findings)
        rows = []
        for experiment in experiments_run(findings):
            option = record.option(experiment.option)
            inputs = "; ".join(
                f"{name} {how}"
                for name in (option.inputs if option else {})
                for how in [provenance(name, record.figures, record.assumptions, record.earlier)]
                if not how.startswith("measured")
            )
            for level in verify(findings, record, experiment, rules).levels:
                why = (
                    level_miss_line(experiment.option, experiment.name, level, record)
                    if level.concurrency != record.concurrency and misses(level)
                    else ""
                )
                rows.append(Row(experiment.name, level.concurrency, level.predicted_ms, level.realised, inputs, why))
        return record, rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("todo", type=Path)
    parser.add_argument("config", type=Path, nargs="?", help="the campaign's TOML (default: the embedded default)")
    parser.add_argument("--ledger", type=Path, help="earlier records to stand in for assumptions (a ledger.json)")
    args = parser.parse_args()
    record, rows = predictions_again(args.todo, args.config, args.ledger)
    print(f"{args.todo}: the record again, at c={record.concurrency}, TPOT {record.tpot_ms:.3f} ms")
    for line in table_lines(rows):
        print(line)
    for line in summary_lines(rows, record.concurrency):
        print(line)
    for row in rows:
        if row.why:
            print(row.why)


def table_lines(rows: list[Row], campaign: str | None = None) -> list[str]:
    """The rows as a Markdown table, with a first column naming the campaign where one is given."""
    first = "| campaign " if campaign is not None else ""
    lines = [
        first
        + "| experiment | level | predicted ms | realised ms [interval] | predicted / realised | not measured here |",
        ("|---" if campaign is not None else "") + "|---|---|---|---|---|---|",
    ]
    for row in rows:
        real = row.realised
        ratio = "n/a" if row.error is None else f"{row.predicted_ms / real.delta_ms:.2f}"  # type: ignore[operator]
        predicted = "n/a" if row.predicted_ms is None else f"{row.predicted_ms:+.3f}"
        lines.append(
            (f"| {campaign} " if campaign is not None else "")
            + f"| {row.experiment} | c={row.concurrency} | {predicted} | {real.delta_ms:+.3f}"
            f" [{real.low_ms:+.3f}, {real.high_ms:+.3f}] | {ratio}{' (wrong sign)' if row.wrong_sign else ''}"
            f" | {row.inputs or '-'} |"
        )
    return lines


def summary_lines(rows: list[Row], capture_level: int) -> list[str]:
    """The median error at the capture's level and over every level, and the wrong signs."""
    lines = []
    for label, chosen in (
        (f"c={capture_level}", [r for r in rows if r.concurrency == capture_level]),
        ("every level", rows),
    ):
        errors = [r.error for r in chosen if r.error is not None]
        if errors:
            lines.append(f"median error at {label}: {100 * statistics.median(errors):.1f}% over {len(errors)} rows")
        of_tpot = [r.error_of_tpot for r in chosen if r.error_of_tpot is not None]
        if of_tpot:
            lines.append(
                f"median |predicted - realised| at {label}: {100 * statistics.median(of_tpot):.2f}% of the base's TPOT"
                f" (largest {100 * max(of_tpot):.2f}%)"
            )
    lines.append(f"wrong signs outside the realised interval: {sum(r.wrong_sign for r in rows)}")
    return lines


if __name__ == "__main__":
    main()
