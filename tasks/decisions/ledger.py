"""`reports/ledger.json`: every verified option, across campaigns, append-only.

One record per experiment run (its id: campaign, experiment and when its last todo finished,
so regenerating a findings document adds nothing): model shape, hardware, vLLM version, the
option, predicted and realised ΔTPOT with the realised interval, and the calibrated prediction.
`orchestrate ledger` prints it with the median |predicted - realised| / |realised|; later
campaigns' decision records show each option's history from it.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestrator.atomic import write_atomic
from orchestrator.cli import ExtraCommand
from orchestrator.errors import InputError

LEDGER_NAME = "ledger.json"


class LevelOutcome(BaseModel):
    """One concurrency of a verified option: predicted before the experiment, realised by it."""

    model_config = ConfigDict(extra="forbid")

    concurrency: int
    predicted_ms: float | None
    realised_ms: float | None
    realised_low_ms: float | None
    realised_high_ms: float | None
    base_tpot_ms: float | None = Field(None, description="the campaign's TPOT at this level (absent in older records)")

    @property
    def error(self) -> float | None:
        if self.predicted_ms is None or not self.realised_ms:
            return None
        return abs(self.predicted_ms - self.realised_ms) / abs(self.realised_ms)

    @property
    def error_of_tpot(self) -> float | None:
        return share_of_tpot(self.predicted_ms, self.realised_ms, self.base_tpot_ms)


def share_of_tpot(predicted: float | None, realised: float | None, tpot: float | None) -> float | None:
    """|predicted - realised| over the base's TPOT: a miss's size beside the step, where the relative
    error of a change near zero (W4A16 at c=1 on a MoE: +0.009 ms realised) says little."""
    if predicted is None or realised is None or not tpot:
        return None
    return abs(predicted - realised) / tpot


class LedgerRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    campaign: str
    experiment: str
    option: str
    change: str
    model: str = Field(description="model type and shape: layers x hidden, TP")
    hardware: str
    vllm: str | None
    concurrency: int
    predicted_ms: float | None
    realised_ms: float | None
    realised_low_ms: float | None
    realised_high_ms: float | None
    base_tpot_ms: float | None = Field(
        None, description="the campaign's TPOT at the record's level (absent in older records)"
    )
    calibrated_ms: float | None = None
    still_assumed: list[str] = Field(default_factory=list)
    provenance: dict[str, str] = Field(
        default_factory=dict,
        description="each input of the prediction and where it came from: measured (by which todo) or assumed",
    )
    measured_inputs: dict[str, float | None] = Field(
        default_factory=dict,
        description="the inputs the experiment measured (its `measured` expressions over the variant's"
        " figures): a later campaign on the same hardware, shape and vLLM uses them for its assumptions",
    )
    levels: list[LevelOutcome] = Field(
        default_factory=list, description="every level both served: the prediction and the realised change"
    )
    recorded_at: str

    @property
    def error(self) -> float | None:
        """|predicted - realised| / |realised| (None without both)."""
        if self.predicted_ms is None or not self.realised_ms:
            return None
        return abs(self.predicted_ms - self.realised_ms) / abs(self.realised_ms)

    @property
    def error_of_tpot(self) -> float | None:
        return share_of_tpot(self.predicted_ms, self.realised_ms, self.base_tpot_ms)

    @property
    def calibrated_error(self) -> float | None:
        if self.calibrated_ms is None or not self.realised_ms:
            return None
        return abs(self.calibrated_ms - self.realised_ms) / abs(self.realised_ms)


LEDGER_VERSION = 1


class Ledger(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = LEDGER_VERSION
    records: list[LedgerRecord] = Field(default_factory=list)


def load_ledger(path: Path) -> Ledger:
    """The ledger at ``path`` (empty where there is none); a bad one is one line naming the
    file and the record, and is never overwritten."""
    if not path.exists():
        return Ledger()
    if path.is_dir():
        raise InputError(f"{path}: is a folder; the ledger is a JSON file (--ledger names it)")
    keep = "the ledger is append-only: restore it from a copy or move it away to start a new one"
    try:
        raw = path.read_bytes()
        document = json.loads(raw)
    except OSError as err:
        raise InputError(f"{path}: cannot be read ({err.strerror})") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: not valid JSON ({err}); {keep}") from None
    version = document.get("version") if isinstance(document, dict) else None
    if isinstance(document, dict) and version != LEDGER_VERSION:
        raise InputError(
            f"{path}: field 'version': {version!r} is not a ledger version this orchestrate reads"
            f" ({LEDGER_VERSION}); use the orchestrate that wrote it, or {keep}"
        )
    try:
        ledger = Ledger.model_validate(document)
    except ValidationError as err:
        first = err.errors()[0]
        loc = list(first["loc"])
        where = ".".join(str(p) for p in loc)
        if len(loc) >= 2 and loc[0] == "records" and isinstance(loc[1], int):
            records = document.get("records") or []
            record = records[loc[1]] if loc[1] < len(records) and isinstance(records[loc[1]], dict) else {}
            where = f"record {loc[1] + 1} ({record.get('id', 'no id')}) field '{'.'.join(str(p) for p in loc[2:])}'"
        raise InputError(f"{path}: {where}: {first['msg']}; {keep}") from None
    ids = [record.id for record in ledger.records]
    twice = next((i for i in ids if ids.count(i) > 1), None)
    if twice is not None:
        raise InputError(f"{path}: record id '{twice}' appears twice; {keep}")
    return ledger


def new_records(path: Path, records: list[LedgerRecord]) -> list[LedgerRecord]:
    """The records not already in the ledger (by id)."""
    known = {record.id for record in load_ledger(path).records}
    return [record for record in records if record.id not in known]


def append(path: Path, records: list[LedgerRecord]) -> int:
    """Add the records not already in the ledger (by id); returns how many were new."""
    ledger = load_ledger(path)
    known = {record.id for record in ledger.records}
    new = [record for record in records if record.id not in known]
    if new:
        ledger.records.extend(new)
        write_atomic(path, ledger.model_dump_json(indent=1).encode(), shared=True)
    return len(new)


def median_error(records: list[LedgerRecord], calibrated: bool = False) -> float | None:
    errors = [e for r in records if (e := (r.calibrated_error if calibrated else r.error)) is not None]
    return statistics.median(errors) if errors else None


def history(records: list[LedgerRecord], option: str) -> str:
    """One option's past: how many verifications, their median predicted / realised."""
    ratios = [
        r.predicted_ms / r.realised_ms
        for r in records
        if r.option == option and r.predicted_ms is not None and r.realised_ms
    ]
    if not ratios:
        return ""
    return f"{len(ratios)} earlier verification(s) in the ledger: median predicted/realised {statistics.median(ratios):.2f}"


def ledger_table(ledger: Ledger) -> list[list[str]]:
    def ms(value: float | None) -> str:
        return "n/a" if value is None else f"{value:+.3f}"

    return [
        [
            r.campaign,
            r.experiment,
            r.model,
            r.hardware,
            f"c={r.concurrency}",
            ms(r.predicted_ms),
            f"{ms(r.realised_ms)} [{ms(r.realised_low_ms)}, {ms(r.realised_high_ms)}]",
            ms(r.calibrated_ms),
            "n/a" if r.error is None else f"{r.error * 100:.0f}%",
            "n/a" if r.calibrated_error is None else f"{r.calibrated_error * 100:.0f}%",
        ]
        for r in ledger.records
    ]


LEDGER_HEADERS = [
    "campaign",
    "experiment",
    "model",
    "hardware",
    "level",
    "predicted ΔTPOT ms",
    "realised ΔTPOT ms [interval]",
    "calibrated ms",
    "|error|",
    "|error| calibrated",
]


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ledger", type=Path, default=None, help=f"the ledger file (default: <reports>/{LEDGER_NAME})")


def same_configuration(record: LedgerRecord) -> tuple[str, ...]:
    """What makes two records repeats of one experiment: the option and its change, the model
    shape, the hardware, the vLLM version and the level. A variant's model is named by its folder,
    not where that lies: two campaigns from clean work folders hold the same checkpoint under
    different parents (the H100's two Llama-8B runs: /tmp/work/models/llama8b_w4a16 and
    /tmp/work2/models/llama8b_w4a16)."""
    change = re.sub(r"model (\S+)", lambda found: "model " + PurePosixPath(found[1]).name, record.change)
    return (record.option, change, record.model, record.hardware, record.vllm or "", str(record.concurrency))


def summary_lines(records: list[LedgerRecord]) -> list[str]:
    """The honest summary: the error of the predictions (each made before its experiment ran:
    the decision record is stored first), per option and overall; the calibrated figures apart
    (they use the experiment's own measurements, so they are no prediction); what each prediction
    rested on; and the spread of the realised change between repeated campaigns."""
    lines = []
    error = median_error(records)
    lines.append(
        "median |predicted - realised| / |realised| over the predictions made before their experiment: "
        + ("n/a" if error is None else f"{error * 100:.1f}% ({sum(r.error is not None for r in records)} records)")
    )
    every = [r.error for r in records if r.error is not None] + _other_level_errors(records)
    if every:
        lines.append(
            f"over every level served (each record's own and the sweep's other levels): median error"
            f" {statistics.median(every) * 100:.1f}% ({len(every)} predictions)"
        )
    of_tpot = [e for r in records for e in [r.error_of_tpot, *(lv.error_of_tpot for lv in _others(r))] if e is not None]
    if of_tpot:
        lines.append(
            f"median |predicted - realised| as % of the base's TPOT, every level: {statistics.median(of_tpot) * 100:.2f}%"
            f" (largest {max(of_tpot) * 100:.2f}%; {len(of_tpot)} predictions, from the records that keep the TPOT)"
        )
    for option in sorted({r.option for r in records}):
        mine = [r for r in records if r.option == option]
        own = median_error(mine)
        wrong = sum(
            1
            for r in mine
            if r.predicted_ms is not None
            and r.realised_ms
            and (r.predicted_ms > 0) != (r.realised_ms > 0)
            and not ((r.realised_low_ms or 0) <= 0 <= (r.realised_high_ms or 0))
        )
        rested = sorted({f"{name} {how.split(':')[0]}" for r in mine for name, how in r.provenance.items()})
        others = _other_level_errors(mine)
        lines.append(
            f"- {option}: {len(mine)} record(s), median error "
            + ("n/a" if own is None else f"{own * 100:.1f}%")
            + f", wrong sign outside the noise {wrong}"
            + (
                f"; at the other levels served: median error {statistics.median(others) * 100:.1f}% over"
                f" {len(others)} level(s)"
                if others
                else ""
            )
            + (f"; inputs: {', '.join(rested)}" if rested else "")
        )
    calibrated = median_error(records, calibrated=True)
    lines.append(
        "median |calibrated - realised| / |realised| (after the fact: the experiment's own measurements in"
        " place of the assumptions; not a prediction): " + ("n/a" if calibrated is None else f"{calibrated * 100:.1f}%")
    )
    groups: dict[tuple[str, ...], list[LedgerRecord]] = {}
    for r in records:
        if r.realised_ms is not None:
            groups.setdefault(same_configuration(r), []).append(r)
    for key, repeated in groups.items():
        if len(repeated) < 2:
            continue
        values = [r.realised_ms for r in repeated if r.realised_ms is not None]
        middle = statistics.median(values)
        spread = (max(values) - min(values)) / abs(middle) * 100 if middle else None
        lines.append(
            f"repeated: {key[0]} on {key[2]} ({key[3]}), {len(values)} campaigns: realised"
            f" {min(values):+.3f} to {max(values):+.3f} ms"
            + ("" if spread is None else f", spread {spread:.0f}% of the median")
        )
    return lines


def _others(record: LedgerRecord) -> list[LevelOutcome]:
    """The levels a record's experiment served beside its own (its own is the record's)."""
    return [level for level in record.levels if level.concurrency != record.concurrency]


def _other_level_errors(records: list[LedgerRecord]) -> list[float]:
    return [level.error for r in records for level in _others(r) if level.error is not None]


def _run(args: argparse.Namespace) -> int:
    from orchestrator.report import md_table

    path = args.ledger or args.reports / LEDGER_NAME
    if args.ledger is not None and not path.exists():
        raise InputError(f"{path}: no such ledger; check --ledger")
    ledger = load_ledger(path)
    print(f"{path}: {len(ledger.records)} verified option(s)")
    if ledger.records:
        print(md_table(LEDGER_HEADERS, ledger_table(ledger)))
    for line in summary_lines(ledger.records):
        print(line)
    return 0


LEDGER = ExtraCommand(
    help="every verified option (predicted vs realised, across campaigns) and the median error",
    arguments=_arguments,
    run=_run,
)


def ledger_history(findings: Any, option: str) -> str:
    """How ``option`` fared in the earlier campaigns of this reports folder's ledger (findings:
    tasks.view.Findings)."""
    return history(load_ledger(findings.session.reports_dir / LEDGER_NAME).records, option)
