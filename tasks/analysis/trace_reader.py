"""Stream a Chrome/Kineto trace into compact columns without holding its events as objects.

Kineto writes one top-level event per `\\n  {` ... `\\n  }` block inside `"traceEvents": [`.
The file is read (and gunzipped) in blocks; each run of complete events is decoded by msgspec
into slotted structs, and only the events the analysis uses are kept, as numpy columns with
names interned once. Memory stays at one block plus the kept columns, whatever the file size.
A trace in another layout falls back to one typed decode of the whole document.
"""

from __future__ import annotations

import gzip
import re
import zlib
from array import array
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import numpy as np

from orchestrator.errors import InputError

BLOCK_BYTES = 4 << 20
EVENTS_START = re.compile(rb'"traceEvents"\s*:\s*\[')
RANK = re.compile(rb'"distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*(\d+)')
BETWEEN_EVENTS = b"\n  },\n  {"
DEVICE_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
STEP_CATS = frozenset({"user_annotation", "gpu_user_annotation"})


class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    ts: float = 0.0
    dur: float = 0.0
    tid: int | str = 0


class Whole(msgspec.Struct):
    traceEvents: list[Event] = []  # noqa: N815 - the format's name
    distributedInfo: dict | None = None  # noqa: N815


EVENTS = msgspec.json.Decoder(list[Event])
WHOLE = msgspec.json.Decoder(Whole)


@dataclass
class Columns:
    """The events one analysis needs: device work, CPU ops worth keeping, step annotations."""

    rank: int | None = None
    names: list[str] = field(default_factory=list)
    _name_index: dict[str, int] = field(default_factory=dict, repr=False)
    device_ts: array = field(default_factory=lambda: array("d"))
    device_dur: array = field(default_factory=lambda: array("d"))
    device_name: array = field(default_factory=lambda: array("q"))
    cpu_ts: array = field(default_factory=lambda: array("d"))
    cpu_dur: array = field(default_factory=lambda: array("d"))
    cpu_name: array = field(default_factory=lambda: array("q"))
    cpu_tid: list[int | str] = field(default_factory=list)
    steps: list[tuple[str, str, float, float, int | str]] = field(default_factory=list)  # cat, name, ts, dur, tid

    def name_ids(self, names: list[str]) -> list[int]:
        index = self._name_index
        for name in set(names).difference(index):
            index[name] = len(self.names)
            self.names.append(name)
        return [index[name] for name in names]

    def take(self, events: list[Event]) -> None:
        # Comprehensions, not a per-event loop with branches: this runs a million times a rank.
        device = [e for e in events if e.cat in DEVICE_CATS and e.ph == "X"]
        if device:
            self.device_ts.extend([e.ts for e in device])
            self.device_dur.extend([e.dur for e in device])
            self.device_name.extend(self.name_ids([e.name for e in device]))
        cpu = [e for e in events if e.cat == "cpu_op" and e.ph == "X"]
        if cpu:
            self.cpu_ts.extend([e.ts for e in cpu])
            self.cpu_dur.extend([e.dur for e in cpu])
            self.cpu_name.extend(self.name_ids([e.name for e in cpu]))
            self.cpu_tid.extend([e.tid for e in cpu])
        self.steps.extend((e.cat, e.name, e.ts, e.dur, e.tid) for e in events
                          if e.cat in STEP_CATS and e.name.startswith("execute_") and e.ph == "X")

    def arrays(self, which: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        prefix = "device" if which == "device" else "cpu"
        return (np.frombuffer(getattr(self, f"{prefix}_ts"), dtype=np.float64),
                np.frombuffer(getattr(self, f"{prefix}_dur"), dtype=np.float64),
                np.frombuffer(getattr(self, f"{prefix}_name"), dtype=np.int64))


def _bad(path: Path, why: str) -> InputError:
    return InputError(f"{path}: {why}; it may be truncated or not a profiler trace: fetch it again"
                      " (`orchestrate reset profile_capture`)")


def read_columns(path: Path) -> Columns:
    columns = Columns()
    try:
        opener = gzip.open if path.read_bytes()[:2] == b"\x1f\x8b" else open
    except OSError as err:
        raise _bad(path, f"cannot read ({err})") from None
    try:
        with opener(path, "rb") as stream:
            head = stream.read(BLOCK_BYTES)
            start = EVENTS_START.search(head)
            if start is None or head[start.end(): start.end() + 4] != b"\n  {":
                return _whole(path, head + stream.read(), columns)
            if match := RANK.search(head[: start.start()]):
                columns.rank = int(match[1])
            buffer = head[start.end():]
            while True:
                block = stream.read(BLOCK_BYTES)
                cut = buffer.rfind(BETWEEN_EVENTS)
                if cut >= 0:
                    _take_block(path, buffer[: cut + 4], columns)
                    buffer = buffer[cut + 5:]
                if not block:
                    break
                buffer += block
            end = buffer.rfind(b"\n  ]")
            if end < 0:
                raise _bad(path, "the traceEvents array never closes")
            tail = buffer[:end]
            if tail.strip():
                _take_block(path, tail, columns)
            if columns.rank is None and (match := RANK.search(buffer[end:])):
                columns.rank = int(match[1])
    except (EOFError, zlib.error, gzip.BadGzipFile) as err:
        raise _bad(path, f"compressed data ends early or is corrupt ({type(err).__name__})") from None
    return columns


WANTED_CATS = DEVICE_CATS | STEP_CATS
CAT_KEY = b'"cat": "'
KINETO_EVENT_START = b'\n  {\n    "ph": "'


def _wanted_pattern(cats: frozenset[str]) -> re.Pattern[bytes]:
    alternatives = b"|".join(re.escape(cat.encode()) for cat in sorted(cats))
    return re.compile(rb'\n  \{\n    "ph": "X", "cat": "(?:' + alternatives + rb')"')


WANTED_GPU = _wanted_pattern(WANTED_CATS)
WANTED_ANY = _wanted_pattern(WANTED_CATS | {"cpu_op"})


def _take_block(path: Path, text: bytes, columns: Columns) -> None:
    """Decode only the events the analysis can use.

    On a GPU trace most events are CPU ops, runtime calls and flows the breakdown never reads,
    so finding the wanted ones by their first line (Kineto writes `ph` then `cat`) and decoding
    only those is several times cheaper than decoding every event. CPU ops are kept while no
    device event has been seen: a CPU trace needs them, a GPU trace does not. A block in
    another field order is split event by event instead.
    """
    if KINETO_EVENT_START in text[:64]:
        pattern = WANTED_GPU if columns.device_ts else WANTED_ANY
        kept = []
        for match in pattern.finditer(text):
            kept.append(text[match.start() + 3 : text.find(b"\n  }", match.end()) + 4])
        if kept:
            columns.take(_decode(path, b"[" + b",".join(kept) + b"]"))
        return
    wanted = WANTED_CATS if columns.device_ts else WANTED_CATS | {"cpu_op"}
    parts = text.split(b"\n  },\n  {")
    # Inner text of each event: the first part still has its opening brace, the last its closing one.
    parts[0] = parts[0][parts[0].find(b"{") + 1 :]
    parts[-1] = parts[-1][: parts[-1].rstrip().rfind(b"}")]
    inner = []
    for part in parts:
        at = part.find(CAT_KEY)
        if at >= 0 and part[at + 8 : part.find(b'"', at + 8)].decode() in wanted:
            inner.append(part)
    if inner:
        columns.take(_decode(path, b"[{" + b"},{".join(inner) + b"}]"))


def _decode(path: Path, array_text: bytes) -> list[Event]:
    try:
        return EVENTS.decode(array_text)
    except msgspec.DecodeError as err:
        raise _bad(path, f"malformed events ({err})") from None


def _whole(path: Path, data: bytes, columns: Columns) -> Columns:
    try:
        document = WHOLE.decode(data)
    except msgspec.DecodeError as err:
        raise _bad(path, f"not a Chrome/Kineto trace ({err})") from None
    if document.distributedInfo and isinstance(document.distributedInfo.get("rank"), int):
        columns.rank = document.distributedInfo["rank"]
    columns.take(document.traceEvents)
    return columns
