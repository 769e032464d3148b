"""How far a long step is, while it runs: a sweep level's requests, trace bytes, benchmark rows.

On a terminal each step in flight is a rich progress bar (count, rate, time left) that goes away
when its task ends; anywhere else (a log file, CI, a pipe) it is a plain line once a step has
run ``every_s`` seconds, then at most one every ``every_s``, and its last: a log shows that a
40-minute sweep is moving without a line per request, and a step shorter than ``every_s`` adds
no line at all (its task logs what it measured). Updates arrive from transport reader threads.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from typing import TextIO


@dataclass
class _Step:
    first_at: float
    first_done: float
    shown_at: float = 0.0
    bar: int | None = None


def _number(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() or value >= 100 else f"{value:,.1f}"


class ProgressDisplay:
    def __init__(self, stream: TextIO | None = None, every_s: float = 15.0, live: bool | None = None) -> None:
        self.stream = stream or sys.stdout
        self.every_s = every_s
        self.live = self.stream.isatty() if live is None else live
        self._steps: dict[tuple[str, str], _Step] = {}
        self._lock = threading.Lock()
        self._bars = None

    def update(
        self, task_id: str, label: str, done: float, total: float | None, unit: str = "", note: str = ""
    ) -> None:
        """``total`` None or 0: a count with no known end (bytes written so far)."""
        now = time.monotonic()
        with self._lock:
            step = self._steps.setdefault((task_id, label), _Step(first_at=now, first_done=done))
            rate = (done - step.first_done) / (now - step.first_at) if now - step.first_at > 0.25 else None
            if self.live:
                self._show_bar(step, task_id, label, done, total, unit, rate, note)
                return
            last = bool(total) and done >= total
            if not (last and step.shown_at) and now - (step.shown_at or step.first_at) < self.every_s:
                return
            step.shown_at = now
            self.stream.write(self._line(task_id, label, done, total, unit, rate, note) + "\n")
            self.stream.flush()

    def end(self, task_id: str) -> None:
        """The task is over: its steps are forgotten and their bars removed."""
        with self._lock:
            for key in [key for key in self._steps if key[0] == task_id]:
                step = self._steps.pop(key)
                if self._bars is not None and step.bar is not None:
                    self._bars.remove_task(step.bar)
            if self._bars is not None and not self._steps:
                self._bars.stop()
                self._bars = None

    @staticmethod
    def _line(
        task_id: str, label: str, done: float, total: float | None, unit: str, rate: float | None, note: str
    ) -> str:
        text = f"[{task_id}] {label}: {_number(done)}" + (f"/{_number(total)}" if total else "")
        text += f" {unit}".rstrip()
        if rate:
            text += f", {rate:,.1f} {unit or 'units'}/s"
            if total and done < total:
                text += f", ~{(total - done) / rate:,.0f} s left"
        return text + (f" ({note})" if note else "")

    def _show_bar(
        self,
        step: _Step,
        task_id: str,
        label: str,
        done: float,
        total: float | None,
        unit: str,
        rate: float | None,
        note: str,
    ) -> None:
        from rich.console import Console
        from rich.markup import escape
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

        if self._bars is None:
            self._bars = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.fields[count]}"),
                TimeRemainingColumn(),
                console=Console(file=self.stream),
                transient=True,
            )
            self._bars.start()
        count = escape(f"{_number(done)}{'/' + _number(total) if total else ''} {unit}")
        if rate:
            count += f"  {rate:,.1f}/s"
        if note:
            count += f"  {escape(note)}"
        description = escape(f"[{task_id}] {label}")  # "[macro_sweep]" is not a style
        if step.bar is None:
            step.bar = self._bars.add_task(description, total=total or None, completed=done, count=count)
        else:
            self._bars.update(step.bar, total=total or None, completed=done, count=count)
