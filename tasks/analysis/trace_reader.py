"""Stream a Chrome/Kineto trace into compact columns, whatever its JSON layout.

The file is read (and gunzipped) in blocks. The `traceEvents` array is cut into runs of whole
events at candidate boundaries (`}` `,` `{` with any whitespace between), and each run is
decoded by msgspec as one JSON array of slotted structs. A cut is proven, not assumed: a run
decodes only when the cut falls between two events of the array (a cut inside an event leaves
an unbalanced bracket or an open string, a syntax error), and a failed cut is tried at an
earlier candidate or with more of the file. So any valid JSON layout gives the events a plain
parser gives (Kineto's, compact, one key a line, keys in any order, the array anywhere in the
document, or a bare array), memory stays at a few blocks plus the kept columns, and a layout
no cut fits falls back to one decode of the whole document. What is kept: device work, CPU
ops, and the annotations that can mark steps, as numpy columns with names interned once; a run
is decoded as a union tagged by `cat`, so an event of a category not kept costs an empty struct,
not its strings and numbers.
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
from tasks.analysis.trace_events import (
    BY_CATEGORY,
    CPU_PASS_CATS,
    DEVICE_CATS,
    EVENTS,
    GPU_PASS_CATS,
    LAUNCH_CATS,
    LINK_PASS_CATS,
    LINKED,
    LINKED_WHOLE,
    METADATA,
    STEP_CATS,
    WHOLE,
    Event,
)

MAX_EVENT_US = 3.6e9
"""An hour: no profiled op lasts longer; a duration beyond it is a broken writer's."""
BLOCK_BYTES = 4 << 20
MAX_PENDING_BYTES = 256 << 20
"""A run of this many bytes with no provable cut: decode the whole document instead."""
EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
CANDIDATE_CUT = re.compile(rb"\}\s*,\s*\{")
ARRAY_END = re.compile(rb"\}\s*\]")
LEADING_SPACE = re.compile(rb"\s*")
CUT_TRIES = 16
RANK_IN_NAME = re.compile(r"rank[-_.]?(\d+)", re.I)


@dataclass
class Columns:
    """The events one analysis needs: device work, CPU ops, and annotations (step markers)."""

    keep_cpu: bool = False
    """CPU ops are kept only on a second pass, for a trace with no device events (a CPU trace):
    deciding by what the whole file holds keeps the result independent of event order."""
    linked: bool = False
    """Launch correlations are kept only on a second pass, for a GPU trace whose step marks are on
    the CPU alone (no GPU-timeline annotation): its kernels are assigned to a step by the CPU
    time of their launch, not by their own start (they run after the CPU range may have closed)."""
    rank: int | None = None
    world_size: int | None = None
    trace_id: str | None = None
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
    device_correlation: array = field(default_factory=lambda: array("q"))
    launch_ts: array = field(default_factory=lambda: array("d"))
    launch_correlation: array = field(default_factory=lambda: array("q"))
    runtime_calls: int = 0
    """CUDA/HIP runtime calls seen by the CPU pass: a trace with them and no kernel is a GPU
    trace whose device activity was not recorded."""
    dropped: int = 0
    """Events left out for a duration no profiled op has (negative, not finite, over an hour)."""

    def drop_bad_durations(self) -> None:
        """Leave out events whose duration is negative, not finite or over MAX_EVENT_US (a broken
        writer: 1e15 or 1e300 µs), counted in ``dropped``: one would make a step's figures
        negative or 300 digits long."""
        for prefix in ("device", "cpu"):
            ts, dur, names = self.arrays(prefix)
            bad = ~np.isfinite(dur) | (dur < 0) | (dur > MAX_EVENT_US) | ~np.isfinite(ts)
            if not len(ts) or not bad.any():
                continue
            keep = ~bad
            self.dropped += int(bad.sum())
            for name, kind, values in (("ts", "d", ts), ("dur", "d", dur), ("name", "q", names)):
                setattr(self, f"{prefix}_{name}", array(kind, values[keep].tobytes()))
            if prefix == "cpu":
                self.cpu_tid = [tid for tid, kept in zip(self.cpu_tid, keep, strict=True) if kept]
            elif len(self.device_correlation) == len(keep):
                correlation = np.frombuffer(self.device_correlation, dtype=np.int64)
                self.device_correlation = array("q", correlation[keep].tobytes())

    def name_ids(self, names: list[str]) -> list[int]:
        index = self._name_index
        # In first-seen order (not a set's, which changes with the hash seed): the same trace
        # gives the same ids, so sums run in the same order and results are bit-identical.
        for name in dict.fromkeys(names):
            if name not in index:
                index[name] = len(self.names)
                self.names.append(name)
        return [index[name] for name in names]

    def take(self, events: list[Event]) -> None:
        # Comprehensions, not a per-event loop with branches: this runs a million times a rank.
        wanted = self.wanted
        kept = [e for e in events if e.cat in wanted and e.ph == "X"]
        device = [e for e in kept if e.cat in DEVICE_CATS]
        if device:
            self.device_ts.extend([e.ts for e in device])
            self.device_dur.extend([e.dur for e in device])
            self.device_name.extend(self.name_ids([e.name for e in device]))
            if self.linked:
                self.device_correlation.extend([e.args.correlation if e.args else -1 for e in device])
        if self.linked:
            launches = [e for e in kept if e.cat in LAUNCH_CATS and e.args]
            self.launch_ts.extend([e.ts for e in launches])
            self.launch_correlation.extend([e.args.correlation for e in launches])
        if self.keep_cpu:
            self.runtime_calls += sum(1 for e in events if e.cat in LAUNCH_CATS)
        cpu = [e for e in kept if e.cat == "cpu_op"]
        if cpu:
            self.cpu_ts.extend([e.ts for e in cpu])
            self.cpu_dur.extend([e.dur for e in cpu])
            self.cpu_name.extend(self.name_ids([e.name for e in cpu]))
            self.cpu_tid.extend([e.tid for e in cpu])
        self.steps.extend((e.cat, e.name, e.ts, e.dur, e.tid) for e in kept if e.cat in STEP_CATS)

    @property
    def wanted(self) -> frozenset[str]:
        return CPU_PASS_CATS if self.keep_cpu else LINK_PASS_CATS if self.linked else GPU_PASS_CATS

    @property
    def pass_name(self) -> str:
        return "cpu" if self.keep_cpu else "linked" if self.linked else "gpu"

    @property
    def marks_cpu_only(self) -> bool:
        """Device work, and step-like annotations on the CPU timeline only."""
        cats = {cat for cat, *_ in self.steps}
        return bool(self.device_ts) and "gpu_user_annotation" not in cats and "user_annotation" in cats

    def arrays(self, which: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        prefix = "device" if which == "device" else "cpu"
        return (
            np.frombuffer(getattr(self, f"{prefix}_ts"), dtype=np.float64),
            np.frombuffer(getattr(self, f"{prefix}_dur"), dtype=np.float64),
            np.frombuffer(getattr(self, f"{prefix}_name"), dtype=np.int64),
        )


def _bad(path: Path, why: str, fix: str | None = None) -> InputError:
    return InputError(
        f"{path}: {why}; "
        + (fix or "it may be truncated or not a profiler trace: fetch it again (`orchestrate reset profile_capture`)")
    )


def _open(path: Path):  # a binary file object
    try:
        with open(path, "rb") as probe:
            magic = probe.read(2)
        return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")
    except OSError as err:
        raise _bad(path, f"cannot read ({err.strerror or err})") from None


def read_columns(path: Path) -> Columns:
    columns = _read(path, Columns())
    if not columns.device_ts:  # a CPU trace: its CPU ops are the work, read them too
        columns = _read(path, Columns(keep_cpu=True))
    elif columns.marks_cpu_only:  # steps marked on the CPU: link each kernel to its launch
        columns = _read(path, Columns(linked=True))
    if columns.rank is None and (match := RANK_IN_NAME.search(path.name)):
        columns.rank = int(match[1])
    columns.drop_bad_durations()
    return columns


def _read(path: Path, columns: Columns) -> Columns:
    try:
        with _open(path) as stream:
            _stream_events(path, stream, columns)
    except (EOFError, zlib.error, gzip.BadGzipFile) as err:
        raise _bad(path, f"compressed data ends early or is corrupt ({type(err).__name__})") from None
    except OSError as err:
        raise _bad(path, f"cannot read ({err.strerror or err})") from None
    return columns


class _NoProvableCut(Exception):
    """The streamed cuts could not be proven: decode the whole document instead."""


def _stream_events(path: Path, stream, columns: Columns) -> None:
    buffer = stream.read(BLOCK_BYTES)
    # Where the events array starts: after `"traceEvents": [`, or a bare array document.
    while True:
        stripped = buffer.lstrip()
        if stripped[:1] == b"[":
            prefix, buffer = b"", stripped[1:]
            break
        start = EVENTS_KEY.search(buffer)
        if start is not None:
            prefix, buffer = buffer[: start.end() - 1], buffer[start.end() :]
            break
        block = stream.read(BLOCK_BYTES)
        if not block or len(buffer) > MAX_PENDING_BYTES:
            _whole(path, buffer + block + stream.read(), columns)
            return
        buffer += block
    try:
        trailer = _events_then_trailer(path, stream, buffer, columns)
    except _NoProvableCut:
        # Start over with one decode of the document (the columns so far are discarded).
        columns.__init__(keep_cpu=columns.keep_cpu, linked=columns.linked)
        stream.seek(0)
        _whole(path, stream.read(), columns)
        return
    if prefix:
        # The document without its events must be valid JSON: proves the key was the
        # top-level `traceEvents` (not text inside a string) and gives the metadata.
        try:
            metadata = METADATA.decode(prefix + b"[]" + trailer)
        except msgspec.DecodeError as err:
            raise _bad(path, f"not valid JSON around the traceEvents array ({err})") from None
        _metadata(columns, metadata.distributedInfo, metadata.trace_id)
    elif trailer.strip():
        raise _bad(path, "text after the events array")


def _events_then_trailer(path: Path, stream, text: bytes, columns: Columns) -> bytes:
    """Take the array's events run by run; returns the document after the array's `]`.

    The buffer keeps one byte before the current run: the run is decoded in place, with that
    byte set to `[` and the byte after the run's last `}` set to `]` for the decode."""
    buffer = bytearray(b"[") + text
    at_end = False
    while True:
        if not at_end:
            block = stream.read(BLOCK_BYTES)
            at_end = not block
            buffer += block
        first = LEADING_SPACE.match(buffer, 1).end()
        if buffer[first : first + 1] == b"]":  # an empty array, or the end right after a cut
            return bytes(buffer[first + 1 :])
        cut = _last_provable_cut(path, buffer, columns)
        if cut is not None:
            del buffer[: cut - 1]
        if at_end:
            end = _array_end(path, buffer, columns)
            return bytes(buffer[end:])
        if cut is None and len(buffer) > MAX_PENDING_BYTES:
            raise _NoProvableCut


def _last_provable_cut(path: Path, buffer: bytearray, columns: Columns) -> int | None:
    """Take the events before the last candidate cut that proves to fall between two events;
    returns where the next event starts, or None (no provable cut in this buffer yet)."""
    window = 1 << 16
    tried = 0
    high = len(buffer)  # candidates at or after this were tried with a narrower window
    while True:
        low = max(1, len(buffer) - window)
        found = [m for m in CANDIDATE_CUT.finditer(buffer, low, high + 64) if m.start() < high]
        for match in reversed(found):
            tried += 1
            if _take_run(path, buffer, match.start(), columns):
                return match.end() - 1
            if tried >= CUT_TRIES:
                return None
        if low == 1:
            return None
        high, window = low, window * 8


def _array_end(path: Path, buffer: bytearray, columns: Columns) -> int:
    """At the end of the file: the last events, and where the array closes (the first `}]`
    before which the run proves whole)."""
    for match in ARRAY_END.finditer(buffer, 1):
        if _take_run(path, buffer, match.start(), columns):
            return match.end()
    # No close proves whole: truncated, or a value JSON does not allow (NaN): one decode of the
    # document names which, and where.
    raise _NoProvableCut


def _take_run(path: Path, buffer: bytearray, last: int, columns: Columns) -> bool:
    """Take the events of buffer[1 : last + 1] (from an event's `{` to the `}` at ``last``), or
    return False when that text is not a sequence of whole events (the cut fell inside one: an
    open bracket or string is left, a syntax error). A run that is whole but holds a value of
    the wrong type is a bad trace, not a bad cut. Every layout takes this one path: first decoded
    by category (`BY_CATEGORY`), and where an event has no or an unknown `cat`, every event's
    fields. (A fast path keyed to Kineto's first lines was measured here earlier: proving it
    equal needs a decode of every event's cat, ts and dur, which costs what decoding every event
    does.)"""
    after = buffer[last + 1]
    buffer[0], buffer[last + 1] = ord("["), ord("]")
    by_category, kept = BY_CATEGORY[columns.pass_name]
    try:
        with memoryview(buffer)[: last + 2] as view:
            try:
                events = [event for event in by_category.decode(view) if event.__class__ in kept]
            except msgspec.ValidationError:  # an event with no or an unknown `cat`: every field
                events = (LINKED if columns.linked else EVENTS).decode(view)
    except msgspec.ValidationError as err:
        raise _bad(path, f"malformed events ({err})") from None
    except msgspec.DecodeError:
        return False
    finally:
        buffer[last + 1] = after
    columns.take(events)
    return True


BYTE_AT = re.compile(r"\(byte (\d+)\)")


def _why_not_json(data: bytes, error: str) -> tuple[str, str | None]:
    """msgspec's decode error as the reason a person can act on: truncated, or the value at the
    byte it names (NaN and Infinity, which some writers emit, are not JSON)."""
    if "truncated" in error:
        return "the JSON ends before the document closes (the file is cut short)", None
    at = BYTE_AT.search(error)
    if at is None:
        return f"not a Chrome/Kineto trace ({error})", None
    offset = int(at[1])
    near = data[max(0, offset - 20) : offset + 20].decode("utf-8", "replace").replace("\n", " ")
    value = re.match(rb"-?(NaN|Infinity|inf|nan)", data[offset : offset + 10])
    if value is not None:
        return (
            f"{value[0].decode()} at byte {offset} (near `{near}`) is not a JSON value",
            "whatever wrote the trace must drop or quote it; the file is otherwise whole",
        )
    return f"not valid JSON at byte {offset} (near `{near}`): {error.split(' (byte')[0]}", None


def _whole(path: Path, data: bytes, columns: Columns) -> Columns:
    try:
        if data.lstrip()[:1] == b"[":
            columns.take((LINKED if columns.linked else EVENTS).decode(data))
            return columns
        document = (LINKED_WHOLE if columns.linked else WHOLE).decode(data)
    except msgspec.DecodeError as err:
        raise _bad(path, *_why_not_json(data, str(err))) from None
    _metadata(columns, document.distributedInfo, document.trace_id)
    columns.take(document.traceEvents)
    return columns


def _metadata(columns: Columns, info: dict | None, trace_id: str | None) -> None:
    """Which rank of how many wrote the trace, and the profiler session's id: the sanity checks
    across files (duplicate ranks, a folder of unrelated traces) read them."""
    info = info or {}
    if isinstance(info.get("rank"), int):
        columns.rank = info["rank"]
    if isinstance(info.get("world_size"), int):
        columns.world_size = info["world_size"]
    columns.trace_id = trace_id
