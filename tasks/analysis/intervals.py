"""Per-step interval arithmetic of the breakdown: CPU op time counted once where ops nest, the
union of busy time, and the 95% interval of a mean over steps."""

from __future__ import annotations

import numpy as np

from tasks.analysis.categories import Category


def _ci95_ms(per_step_us: np.ndarray) -> float | None:
    """Half-width of the 95% interval of a mean over steps (1.96 standard errors), in ms: the
    noise of a per-step figure, for comparing two captures."""
    if per_step_us.shape[0] < 2:
        return None
    return float(1.96 * per_step_us.std(ddof=1) / np.sqrt(per_step_us.shape[0]) / 1000)


def _cpu_ops(columns, classify) -> tuple[np.ndarray, ...]:  # Columns, Classifier
    """CPU op time, each microsecond counted once. CPU ops nest (a torch.compile graph call >
    aten::linear > aten::addmm): an op a rule matches counts whole, under its category, unless it
    is inside another matched op; an op an `own_time` rule matches counts only its own time
    outside its children, under that rule's category, and an op no rule matches the same way as
    "other" (and is listed), so neither vanishes nor swallows what it wraps.
    Returns (ts, counted µs, name ids, busy µs): busy is the whole span of ops at the top of
    their thread, for the union of busy time."""
    ts, dur, names = columns.arrays("cpu")
    matched_name = np.array([classify.counts_whole(name) for name in columns.names] or [False], dtype=bool)
    matched = matched_name[names] if len(names) else np.zeros(0, dtype=bool)
    counted = np.zeros(len(ts))
    busy = np.zeros(len(ts))
    keep = np.zeros(len(ts), dtype=bool)
    children_us = np.zeros(len(ts))
    order = sorted(range(len(ts)), key=lambda i: (columns.cpu_tid[i], ts[i], -dur[i]))
    stack: list[tuple[float, int, bool]] = []  # (end, index, inside or is a matched op)
    thread = None
    for i in order:
        if columns.cpu_tid[i] != thread:
            thread, stack = columns.cpu_tid[i], []
        while stack and stack[-1][0] <= ts[i]:
            stack.pop()
        under_matched = bool(stack) and stack[-1][2]
        if stack:
            children_us[stack[-1][1]] += dur[i]
        else:
            busy[i] = dur[i]
        stack.append((ts[i] + dur[i], i, under_matched or bool(matched[i])))
        keep[i] = not under_matched
    counted[keep & matched] = dur[keep & matched]
    own = keep & ~matched
    counted[own] = np.maximum(dur[own] - children_us[own], 0.0)
    wait = collective_waits(columns, classify, ts, dur, names, busy > 0)
    counted += wait
    busy += wait
    return ts[keep], counted[keep], names[keep], busy[keep]


COLLECTIVE_WORK_PREFIX = "gloo:"
"""The annotation gloo's worker threads record around a collective's own work (`gloo:all_reduce`)."""


def collective_waits(
    columns, classify, ts: np.ndarray, dur: np.ndarray, names: np.ndarray, top: np.ndarray
) -> np.ndarray:
    """µs each op at the top of its thread waits, after it returns, for the collective it started.

    On one node without vLLM's shared-memory all-reduce (vLLM's CPU library for an AVX2 CPU has
    none), a CPU worker's all-reduce is `torch.distributed` over gloo: `c10d::allreduce_` only
    queues the work (0.2 ms), gloo's own thread does it (its `gloo:all_reduce` annotation), and
    the worker blocks in the returned work's wait, which the profiler does not record as an op.
    That wait was an unexplained gap after every all-reduce (1.6 ms of them on a 2-core AVX2 host,
    15 ms of a 25 ms step, against 2 ms the ops themselves showed). So a communication op's time
    runs on to the end of the gloo work that starts during it or right after it, and never past
    the thread's next op. Traces without gloo's annotations (vLLM's shared-memory all-reduce,
    NCCL) are unchanged."""
    wait = np.zeros(len(ts))
    work = sorted(
        (start, start + length)
        for _, name, start, length, _ in columns.steps
        if name.startswith(COLLECTIVE_WORK_PREFIX)
    )
    if not work or not len(ts):
        return wait
    work_start = np.array([start for start, _ in work])
    work_end = np.array([end for _, end in work])
    comm = np.array([classify(name) == Category.COMMUNICATION for name in columns.names] or [False], dtype=bool)
    tids = np.array([str(tid) for tid in columns.cpu_tid])
    ops = np.nonzero(top)[0]
    ops = ops[np.lexsort((ts[ops], tids[ops]))]  # by thread, then start
    same_thread = np.append(tids[ops[1:]] == tids[ops[:-1]], False)
    following = np.where(same_thread, np.append(ts[ops[1:]], np.inf), np.inf)  # the thread's next op
    chosen = comm[names[ops]]
    ops, following = ops[chosen], following[chosen]
    j = np.searchsorted(work_start, ts[ops], side="left")  # the first gloo work from the op's start
    found = j < len(work)
    j = np.minimum(j, len(work) - 1)
    ends = np.minimum(work_end[j], following) - (ts[ops] + dur[ops])
    wait[ops] = np.where(found & (work_start[j] < following), np.maximum(ends, 0.0), 0.0)
    return wait


def _union_us(ts: np.ndarray, dur: np.ndarray, step_of: np.ndarray) -> float:
    """Busy time: the union of [ts, ts + dur) intervals, merged within each step.

    One running maximum of the ends over every step at once (a loop over steps cost 0.03 s of a
    rank's 0.3 s on 9,000 steps). It equals each step's own running maximum wherever no work of an
    earlier step still runs past the step's first start (every end in the step is then at least
    that start, so an earlier, smaller maximum cannot win); the steps where it does run past are
    merged on their own, as before."""
    if not len(ts):
        return 0.0
    order = np.lexsort((ts, step_of))
    ts, ends, step_of = ts[order], (ts + dur)[order], step_of[order]
    running_end = np.maximum.accumulate(ends)
    first = np.concatenate(([0], np.nonzero(np.diff(step_of))[0] + 1))
    overrun = np.zeros(len(first), dtype=bool)
    overrun[1:] = running_end[first[1:] - 1] > ts[first[1:]]
    bounds = np.append(first, len(ts))
    for group in np.nonzero(overrun)[0]:  # an earlier step's work runs into this one: its own maximum
        segment = slice(bounds[group], bounds[group + 1])
        running_end[segment] = np.maximum.accumulate(ends[segment])
    # A segment of busy time starts at each step's first event and wherever an event starts
    # after everything before it in its step has ended; it ends at the running end before the
    # next segment starts.
    opens = np.zeros(len(ts), dtype=bool)
    opens[first] = True
    opens[1:] |= ts[1:] > running_end[:-1]
    starts = np.nonzero(opens)[0]
    closes = np.append(starts[1:] - 1, len(ts) - 1)
    return float((running_end[closes] - ts[starts]).sum())


IDLE_TOP = 8
"""The kernels an idle figure names, those the device waited longest for."""


def idle_before(
    chosen: np.ndarray, events: tuple[np.ndarray, ...], names: list[str], category_of_name: list[str]
) -> dict:
    """Device idle time inside the chosen steps, charged to the kernel the device then waited for.

    Under CUDA graphs a step's untraced time beyond its kernels is mostly these gaps (each graph
    node's launch latency, a memset or memcpy node between two kernels), so an option that adds
    nodes adds idle time that no kernel's duration holds (W4A16 on a MoE: Marlin-MoE's alignment
    kernel and two memsets a layer). A gap is the time from the latest end of the step's earlier
    work (any stream) to a kernel's start; the first kernel of a step has none."""
    ts, dur, name_ids, step_of, _ = events
    keep = chosen[step_of]
    ts, ends, name_ids, step_of = ts[keep], (ts + dur)[keep], name_ids[keep], step_of[keep]
    per_step = max(int(chosen.sum()), 1)
    if len(ts) < 2:
        return {"idle_ms_per_step": 0.0, "categories": {}, "top_kernels": []}
    order = np.lexsort((ts, step_of))
    origin = float(ts.min())
    ts, ends, name_ids, step_of = ts[order] - origin, ends[order] - origin, name_ids[order], step_of[order]
    # One running maximum per step without a loop: each step lifted above every earlier one.
    lift = step_of * (float(ends.max()) + 1.0)
    running = np.maximum.accumulate(ends + lift) - lift
    same_step = step_of[1:] == step_of[:-1]
    gap = np.where(same_step, np.maximum(ts[1:] - running[:-1], 0.0), 0.0)
    waited = name_ids[1:]
    name_us = np.bincount(waited, weights=gap, minlength=len(names))
    name_gaps = np.bincount(waited[gap > 0], minlength=len(names))
    categories: dict[str, float] = {}
    for index in np.nonzero(name_us)[0]:
        category = category_of_name[index]
        categories[category] = categories.get(category, 0.0) + float(name_us[index]) / 1000 / per_step
    top = [i for i in np.argsort(-name_us, kind="stable")[:IDLE_TOP] if name_us[i] > 0]
    return {
        "idle_ms_per_step": float(gap.sum()) / 1000 / per_step,
        "categories": dict(sorted(categories.items(), key=lambda item: -item[1])),
        "top_kernels": [
            {
                "name": names[i][:160],
                "category": category_of_name[i],
                "ms_per_step": float(name_us[i]) / 1000 / per_step,
                "gaps_per_step": int(name_gaps[i]) / per_step,
                "mean_us_per_gap": float(name_us[i]) / int(name_gaps[i]),
            }
            for i in top
        ],
    }
