"""A rank's step windows: vLLM's per-stream annotations merged into one window a step, the
whole trace as one window where no step is marked, and each kernel's launch time (for steps
marked on the CPU alone, a kernel belongs to the step that launched it)."""

from __future__ import annotations

import numpy as np

from orchestrator.errors import InputError
from tasks.analysis.trace_reader import Columns


def launch_times(columns: Columns, ts: np.ndarray) -> np.ndarray:
    """Each device event's launch time on the CPU (its runtime call with the same correlation
    id), or its own start where the trace has no such call."""
    device = np.frombuffer(columns.device_correlation, dtype=np.int64)
    launch_ids = np.frombuffer(columns.launch_correlation, dtype=np.int64)
    launch_ts = np.frombuffer(columns.launch_ts, dtype=np.float64)
    if not len(launch_ids) or len(device) != len(ts):
        return ts
    order = np.argsort(launch_ids, kind="stable")
    ids, times = launch_ids[order], launch_ts[order]
    at = np.clip(np.searchsorted(ids, device), 0, len(ids) - 1)
    found = (ids[at] == device) & (device >= 0)
    return np.where(found, times[at], ts)


def whole_trace(columns: Columns, kind: str, source: str) -> tuple[float, float, str]:
    ts, dur, _ = columns.arrays("device" if kind == "gpu" else "cpu")
    if not len(ts):
        raise InputError(f"{source}: no device or CPU op events to break down; is it a torch.profiler trace?")
    start = float(ts.min())
    return start, float((ts + dur).max()) - start, "whole trace"


def merge_stream_ranges(ranges: list[tuple[float, float, str, int | str]]) -> list[tuple[float, float, str]]:
    """One window a step. Kineto writes a GPU-timeline annotation for each stream that ran work
    under it (seen on an H200: vLLM's MoE models put a step's shared-expert kernels on a second
    stream, so every step came twice, once 0.5 ms long, inside the main one). A range on another
    stream with the same name that starts inside the current step's window is the same step."""
    merged: list[list] = []
    for ts, dur, name, tid in ranges:
        last = merged[-1] if merged else None
        if last and name == last[2] and tid not in last[3] and ts < last[0] + last[1]:
            last[1] = max(last[1], ts + dur - last[0])
            last[3].add(tid)
        else:
            merged.append([ts, dur, name, {tid}])
    return [(ts, dur, name) for ts, dur, name, _ in merged]
