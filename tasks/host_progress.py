"""Progress lines from a host script to the controller, both sides in one file.

A long host script (the load client, the GEMM and all-reduce benchmarks) says how far it is by
writing a tagged JSON line to stderr; the controller reads stderr as it arrives (`Host.run`'s
``on_stderr_line``) and shows it. One file for both ends, so the tag cannot drift: the
controller imports it as `tasks.host_progress`, and `run_json_script` ships it beside every
script, which import it as `host_progress` (standard library only: it runs on the host's Python).
A script run without it (by hand, an older copy) still works: `reporter()` then reports nothing.
"""

from __future__ import annotations

import json
import sys
import time

TAG = "@orchestrate-progress "


class Reporter:
    """Writes at most one line every ``every_s`` seconds a label, and always the first and last
    (done == total): a 20,000-request run must not flood an SSH channel with 20,000 lines."""

    def __init__(self, every_s: float = 0.5, stream=None) -> None:  # a text stream
        self.every_s = every_s
        self.stream = stream or sys.stderr
        self.last: dict[str, float] = {}

    def __call__(self, label: str, done: float, total: float, unit: str = "", note: str = "") -> None:
        now = time.monotonic()
        if label in self.last and done < total and now - self.last[label] < self.every_s:
            return
        self.last[label] = now
        document = {"label": label, "done": done, "total": total, "unit": unit, "note": note}
        self.stream.write(TAG + json.dumps(document) + "\n")
        self.stream.flush()


def parse(line: str) -> dict | None:
    """The progress document a stderr line carries, or None for any other line (or a damaged
    one: progress is for show, never a reason to fail). The tag may follow a prefix: torchrun
    can put "[rank0]:" before its workers' lines."""
    at = line.find(TAG)
    if at < 0:
        return None
    try:
        document = json.loads(line[at + len(TAG) :])
    except ValueError:
        return None
    if not isinstance(document, dict) or not {"label", "done", "total"} <= document.keys():
        return None
    return document
