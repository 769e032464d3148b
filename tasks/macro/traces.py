"""Arrival traces replayed at their own pace: the public production traces' formats, parsed into
(offset, input tokens, output tokens) rows, scaled by `trace_speed` and cut to
`trace_duration_s`.

Formats, by the file's extension:
- `.csv`, the Azure LLM inference traces: a header with `TIMESTAMP`, `ContextTokens`,
  `GeneratedTokens`; TIMESTAMP a date and time (`2023-11-16 18:15:46.6805900`, fractions of any
  length) or a number of seconds.
- `.jsonl`, Mooncake's traces: one object a line with `timestamp` (milliseconds), `input_length`,
  `output_length` and, where the trace has them, `hash_ids` (prefix blocks; kept for the count of
  shared blocks, not replayed as content).
A malformed row is one line naming the file and the line; nothing is guessed.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from orchestrator.errors import InputError

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


@dataclass(frozen=True)
class Arrival:
    offset_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Trace:
    path: str
    format: str
    arrivals: list[Arrival]

    @property
    def span_s(self) -> float:
        return self.arrivals[-1].offset_s - self.arrivals[0].offset_s if self.arrivals else 0.0

    @property
    def rate_per_s(self) -> float | None:
        """The trace's arrival rate: (arrivals - 1) / span."""
        return (len(self.arrivals) - 1) / self.span_s if self.span_s > 0 else None

    @property
    def shared_block_pct(self) -> float | None:
        """Mooncake: the share of prefix blocks an earlier request already had (what a prefix
        cache could serve at best); None without hash ids."""
        seen: set[int] = set()
        total = shared = 0
        for arrival in self.arrivals:
            for block in arrival.hash_ids:
                total += 1
                shared += block in seen
                seen.add(block)
        return 100 * shared / total if total else None


def read_trace(path: Path, speed: float = 1.0, duration_s: float | None = None) -> Trace:
    """The trace at ``path``, its offsets from the first arrival divided by ``speed`` and cut to
    ``duration_s`` (arrivals at or before it)."""
    if not path.is_file():
        raise InputError(f"{path}: no such trace file; check macro.trace")
    if path.suffix == ".csv":
        arrivals, kind = _azure(path), "azure"
    elif path.suffix == ".jsonl":
        arrivals, kind = _mooncake(path), "mooncake"
    else:
        raise InputError(f"{path}: not a trace format this reads (.csv: Azure, .jsonl: Mooncake); convert it")
    if not arrivals:
        raise InputError(f"{path}: no arrivals; a trace needs at least one row")
    arrivals.sort(key=lambda a: a.offset_s)
    first = arrivals[0].offset_s
    scaled = [Arrival((a.offset_s - first) / speed, a.input_tokens, a.output_tokens, a.hash_ids) for a in arrivals]
    if duration_s is not None:
        scaled = [a for a in scaled if a.offset_s <= duration_s]
    return Trace(str(path), kind, scaled)


def _count(value: object, path: Path, line: int, column: str, least: int) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        raise InputError(f"{path}:{line}: {column} {value!r} is not a whole number; fix the row") from None
    if number < least:
        raise InputError(f"{path}:{line}: {column} {number} is below {least}; fix or drop the row")
    return number


def _seconds(value: str, path: Path, line: int) -> float:
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            stamp, _, fraction = text.partition(".")
            seconds = datetime.fromisoformat(stamp).timestamp() + (float("0." + fraction) if fraction else 0.0)
        except ValueError:
            raise InputError(
                f"{path}:{line}: TIMESTAMP {value!r} is neither a date and time nor seconds; fix the row"
            ) from None
    if not math.isfinite(seconds):
        raise InputError(f"{path}:{line}: TIMESTAMP {value!r} is not a finite time; fix the row")
    return seconds


def _azure(path: Path) -> list[Arrival]:
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in AZURE_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise InputError(
                f"{path}:1: the header lacks {', '.join(missing)}; an Azure trace has {', '.join(AZURE_COLUMNS)}"
            )
        out = []
        for row in reader:
            line = reader.line_num
            if None in row.values() or None in row:
                given = sum(value is not None for key, value in row.items() if key is not None) + len(
                    row.get(None) or []
                )
                raise InputError(
                    f"{path}:{line}: {given} columns, not the header's {len(reader.fieldnames or [])}; fix the row"
                )
            out.append(
                Arrival(
                    _seconds(row["TIMESTAMP"], path, line),
                    _count(row["ContextTokens"], path, line, "ContextTokens", 1),
                    _count(row["GeneratedTokens"], path, line, "GeneratedTokens", 1),
                )
            )
        return out


def _mooncake(path: Path) -> list[Arrival]:
    out = []
    for line, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except ValueError as err:
            raise InputError(f"{path}:{line}: not a JSON object ({err}); fix the row") from None
        if not isinstance(row, dict):
            raise InputError(f"{path}:{line}: not a JSON object; one object a line")
        missing = [key for key in ("timestamp", "input_length", "output_length") if key not in row]
        if missing:
            raise InputError(
                f"{path}:{line}: lacks {', '.join(missing)}; a Mooncake row has timestamp, input_length, output_length"
            )
        stamp = row["timestamp"]
        if not isinstance(stamp, int | float) or isinstance(stamp, bool) or not math.isfinite(stamp):
            raise InputError(f"{path}:{line}: timestamp {stamp!r} is not milliseconds; fix the row")
        hashes = row.get("hash_ids") or []
        if not isinstance(hashes, list) or not all(isinstance(h, int) for h in hashes):
            raise InputError(f"{path}:{line}: hash_ids is not a list of integers; fix the row")
        out.append(
            Arrival(
                stamp / 1000,
                _count(row["input_length"], path, line, "input_length", 1),
                _count(row["output_length"], path, line, "output_length", 1),
                tuple(hashes),
            )
        )
    return out
