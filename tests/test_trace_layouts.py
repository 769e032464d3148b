"""The trace reader against a plain JSON parser: real traces (vLLM CPU TP=2 from the default
campaign, vLLM 0.26 on an H200) re-serialised in other valid JSON layouts give identical
results, and the same as a reference reading with `json.loads`. Step markers, table-driven."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import msgspec
import pytest
from conftest import run_cli

import tasks.analysis.trace_reader as trace_reader
from tasks.analysis.breakdown import Classifier, analyze_columns, analyze_trace
from tasks.analysis.step_markers import step_marker
from tasks.analysis.trace_events import Event
from tasks.analysis.trace_reader import Columns, read_columns

DATA = Path(__file__).parent / "data"
REAL_TRACES = [
    DATA / "vllm_cpu032_tp2_default.rank0.trace.json.gz",
    DATA / "vllm026_h200_llama8b_bf16.rank0.trace.json.gz",
]


def _event_inline_keys(event: dict) -> str:
    """Kineto's indentation, one key a line, `args` on one line: the layout an earlier reader,
    keyed to Kineto's whitespace, silently lost most events of."""
    return "  {\n" + ",\n".join(f"    {json.dumps(k)}: {json.dumps(v)}" for k, v in event.items()) + "\n  }"


def _reordered(document: dict) -> str:
    """Keys reversed in every event, the events array first, odd whitespace between tokens."""
    events = [dict(reversed(list(e.items()))) for e in document["traceEvents"]]
    rest = {k: v for k, v in document.items() if k != "traceEvents"}
    return json.dumps({"traceEvents": events, **rest}, indent="\t", separators=(" ,\r\n ", " :  "))


LAYOUTS = {
    "compact": lambda d: json.dumps(d, separators=(",", ":")),
    "indented, nested objects expanded": lambda d: json.dumps(d, indent=1),
    "one key a line, args inline": lambda d: (
        "{"
        + ",".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in d.items() if k != "traceEvents")
        + ',\n"traceEvents": [\n'
        + ",\n".join(_event_inline_keys(e) for e in d["traceEvents"])
        + "\n]}"
    ),
    "keys reordered, events first, extra whitespace": _reordered,
    "bare array": lambda d: json.dumps(d["traceEvents"]),
}


def _reference(document: dict) -> Columns:
    """What a plain parser gives: every event of the array, through the same filters."""
    events = msgspec.convert(
        [{k: e[k] for k in ("ph", "cat", "name", "ts", "dur", "tid") if k in e} for e in document["traceEvents"]],
        list[Event],
    )
    has_device = any(e.ph == "X" and e.cat in ("kernel", "gpu_memcpy", "gpu_memset") for e in events)
    columns = Columns(keep_cpu=not has_device)  # a CPU trace's work is its CPU ops
    columns.take(events)
    info = document.get("distributedInfo") or {}
    columns.rank = info.get("rank") if isinstance(info.get("rank"), int) else None
    columns.world_size = info.get("world_size") if isinstance(info.get("world_size"), int) else None
    columns.trace_id = document.get("trace_id")
    return columns


@pytest.mark.heavy
@pytest.mark.parametrize("source", REAL_TRACES, ids=lambda p: p.name.split(".")[0])
def test_every_layout_gives_what_a_plain_parser_gives(tmp_path: Path, source: Path, monkeypatch) -> None:
    document = json.loads(gzip.decompress(source.read_bytes()))
    classify = Classifier()
    expected = analyze_columns(_reference(document), classify, "trace")
    assert expected["decode_steps"] > 100  # a real capture, not an empty one
    original = analyze_trace(source, classify)
    assert {**original, "trace": "trace"} == expected
    for name, layout in LAYOUTS.items():
        path = tmp_path / f"{name.split(',')[0].replace(' ', '_')}.json"
        path.write_text(layout(document))
        result = analyze_trace(path, classify, fallback_rank=0)
        if name == "bare array":  # no metadata around the events: no world size, no session id
            result = {**result, "world_size": expected["world_size"], "trace_id": expected["trace_id"]}
        assert {**result, "trace": "trace"} == expected, name
    # Events split across read blocks: small blocks cut every event somewhere, in every layout.
    monkeypatch.setattr(trace_reader, "BLOCK_BYTES", 4093)
    for name in ("compact", "one key a line, args inline"):
        path = tmp_path / "small_blocks.json"
        path.write_text(LAYOUTS[name](document))
        assert {**analyze_trace(path, classify), "trace": "trace"} == expected, name


def test_a_layout_no_cut_fits_falls_back_to_the_whole_document(tmp_path: Path, monkeypatch) -> None:
    """Every event nests `},{` inside its args, so no candidate cut proves itself within the
    try limit; the reader must decode the whole document, not skip events."""
    events = [
        {
            "ph": "X",
            "cat": "kernel",
            "name": f"k{i}",
            "ts": i * 10.0,
            "dur": 5.0,
            "tid": 7,
            "args": {"list": [{"a": 1}, {"b": 2}] * 20},
        }
        for i in range(300)
    ]
    path = tmp_path / "nested.json"
    path.write_text(json.dumps({"traceEvents": events}, separators=(",", ":")))
    monkeypatch.setattr(trace_reader, "BLOCK_BYTES", 2048)
    monkeypatch.setattr(trace_reader, "MAX_PENDING_BYTES", 8192)
    columns = read_columns(path)
    assert len(columns.device_ts) == 300 and columns.names[:2] == ["k0", "k1"]


def _annotated_trace(path: Path, names: list[str]) -> Path:
    """Kernels of 10 µs inside annotations named ``names`` (one a 100 µs window) and one stray."""
    events = []
    for index, name in enumerate(names):
        start = index * 100.0
        events.append({"ph": "X", "cat": "gpu_user_annotation", "name": name, "ts": start, "dur": 90.0, "tid": 1})
        events.append({"ph": "X", "cat": "kernel", "name": "nvjet_gemm", "ts": start + 5, "dur": 10.0, "tid": 7})
    events.append({"ph": "X", "cat": "kernel", "name": "nvjet_gemm", "ts": 95.0, "dur": 1.0, "tid": 7})
    path.write_text(json.dumps({"traceEvents": events}))
    return path


VLLM_DECODE = "execute_context_0(0)_generation_2(2)"
VLLM_PREFILL = "execute_context_1(64)_generation_0(0)"
MARKER_CASES = [
    # (marker, annotation names, steps_kind, steps, other kinds, a note?)
    ("vllm", [VLLM_DECODE, VLLM_DECODE, VLLM_PREFILL], "decode", 2, {"prefill": 1}, False),
    ("vllm", [VLLM_PREFILL, VLLM_PREFILL], "prefill", 2, {}, True),  # a prefill-only capture
    ("vllm", ["ProfilerStep#1", "ProfilerStep#2"], "step", 1, {}, True),  # none: the whole trace
    ("profiler-step", ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"], "step", 3, {}, True),
    ("sglang", ["forward_decode", "forward_extend", "forward_decode"], "decode", 2, {"prefill": 1}, False),
    (
        r"my_iter_(?P<kind>decode|prefill)_\d+",
        ["my_iter_decode_1", "my_iter_prefill_2"],
        "decode",
        1,
        {"prefill": 1},
        False,
    ),
]


@pytest.mark.parametrize(("marker", "names", "kind", "steps", "others", "noted"), MARKER_CASES)
def test_step_markers(tmp_path: Path, marker, names, kind, steps, others, noted) -> None:
    result = analyze_trace(_annotated_trace(tmp_path / "t.json", names), Classifier(), marker=step_marker(marker))
    assert (result["steps_kind"], result["decode_steps"]) == (kind, steps)
    assert {k: v["steps"] for k, v in result["other_steps"].items()} == others
    assert (result["note"] is not None) == noted
    if result["note"] and "whole trace" in result["note"]:
        assert result["wall_ms_per_step"] == pytest.approx(
            (len(names) - 1) * 0.1 + 0.010
        )  # first kernel start to last end
    else:  # the stray kernel at 95 µs is outside every window
        assert result["categories"]["gemm"]["calls_per_step"] == 1.0


def test_a_bad_step_marker_is_one_line(tmp_path: Path) -> None:
    result = run_cli(["analyze", str(DATA / "gpu_decode_trace.json.gz"), "--step-marker", "(unclosed"], tmp_path)
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert (
        "--step-marker '(unclosed': not one of auto, vllm, sglang, profiler-step nor a valid regular expression"
        in result.stderr
    )


def _subset(stored: object, now: object) -> bool:
    if isinstance(stored, dict):
        return isinstance(now, dict) and all(k in now and _subset(v, now[k]) for k, v in stored.items())
    if isinstance(stored, list):
        return isinstance(now, list) and len(now) == len(stored) and all(map(_subset, stored, now))
    return stored == now


@pytest.mark.heavy
def test_analyze_gives_exactly_the_campaigns_breakdown(tmp_path: Path) -> None:
    """The default campaign's two traces (and its todo file, both from the same real run)."""
    todo = json.loads((DATA / "default_campaign_todo.json").read_text())
    stored = next(t for t in todo["todos"] if t["id"] == "analysis_breakdown")["result"]
    traces = tmp_path / "traces"
    traces.mkdir()
    for rank in (0, 1):
        (traces / f"rank{rank}.trace.json.gz").write_bytes(
            (DATA / f"vllm_cpu032_tp2_default.rank{rank}.trace.json.gz").read_bytes()
        )
    result = run_cli(["analyze", str(traces), "--json", "--out", str(tmp_path / "out")], tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    relabelled = ("other", "norm_elementwise", "memcpy", "framework")
    for mine, theirs in zip(printed["ranks"], stored["ranks"], strict=True):
        mine.pop("trace"), theirs.pop("trace")
        # The stored run predates fields and categories added since (quantization, the coverage
        # guard, the own-time rules that name what was `other` on CPU): every figure it has must be
        # the same, but for the categories own-time rules moved time between, whose sum must be.
        ms = {name: mine["categories"].get(name, {}).get("ms_per_step", 0.0) for name in relabelled}
        stored_ms = {name: theirs["categories"].get(name, {}).get("ms_per_step", 0.0) for name in relabelled}
        assert sum(ms.values()) == pytest.approx(sum(stored_ms.values()), rel=1e-12)
        assert ms["other"] < 0.05 * mine["device_ms_per_step"] < stored_ms["other"]
        for name in ("top_kernels", "unmatched_names", "uncategorised", "gemm_sequence", "between_steps"):
            theirs.pop(name, None), mine.pop(name, None)  # lists ranked over the relabelled names
        for figures in (theirs, mine, *theirs["other_steps"].values(), *mine["other_steps"].values()):
            figures.pop("top_kernels", None)
            for name in relabelled:
                figures["categories"].pop(name, None)
        assert _subset(theirs, mine)
        assert all(
            c["calls_per_step"] == 0 for name, c in mine["categories"].items() if name not in theirs["categories"]
        )
    assert printed["imbalance"] == stored["imbalance"]
    assert (tmp_path / "out" / "analysis.md").read_text().count("### Rank ") == 2
    table = run_cli(["analyze", str(traces)], tmp_path, timeout=120)
    assert table.returncode == 0 and "rank 0" in table.stdout and "communication" in table.stdout


def test_a_file_that_is_not_a_trace_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "notes.json").write_text('{"hello": [1, 2')
    result = run_cli(["analyze", str(tmp_path / "notes.json")], tmp_path)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "notes.json" in result.stderr
    assert re.search(r"Traceback", result.stderr) is None


@pytest.mark.heavy
def test_a_real_torch_profiler_trace_with_profiler_steps(tmp_path: Path) -> None:
    """A real trace from torch.profiler on this CPU: 3 recorded steps of 4 matmuls each, marked
    by `prof.step()` (ProfilerStep#N), as a training loop or SGLang's scheduler writes them."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    a = torch.randn(64, 64)
    trace = tmp_path / "train.pt.trace.json"
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=0, warmup=1, active=3, repeat=1),
        on_trace_ready=lambda done: done.export_chrome_trace(str(trace)),
    ) as prof:
        for _ in range(4):
            for _ in range(4):
                torch.mm(a, a)
            prof.step()
    marked = run_cli(["analyze", str(trace), "--json", "--step-marker", "profiler-step"], tmp_path, timeout=120)
    assert marked.returncode == 0, marked.stderr
    rank = json.loads(marked.stdout)["ranks"][0]
    assert (rank["steps_kind"], rank["decode_steps"]) == ("step", 3)
    assert rank["categories"]["gemm"]["calls_per_step"] == 4.0  # aten::mm, outermost, counted per step
    found = json.loads(run_cli(["analyze", str(trace), "--json"], tmp_path, timeout=120).stdout)["ranks"][0]
    assert (found["step_marker"], found["decode_steps"]) == ("profiler-step", 3)  # auto finds ProfilerStep#N
    default = json.loads(
        run_cli(["analyze", str(trace), "--json", "--step-marker", "vllm"], tmp_path, timeout=120).stdout
    )["ranks"][0]
    assert default["decode_steps"] == 1 and "whole trace is one window" in default["note"]
    assert default["categories"]["gemm"]["calls_per_step"] == 12.0


class _Counting:
    """A decoder wrapper that counts the runs it decoded, or refuses them all (``refuse``)."""

    def __init__(self, decoder: msgspec.json.Decoder, refuse: bool = False) -> None:
        self.decoder, self.refuse, self.runs = decoder, refuse, 0

    def decode(self, data):  # as msgspec's
        if self.refuse:
            raise msgspec.ValidationError("refused: decode every event")
        events = self.decoder.decode(data)
        self.runs += 1
        return events


@pytest.mark.parametrize(
    "source",
    [*REAL_TRACES, DATA / "vllm026_h200_kimik2_4layer_int4.rank0.trace.json.gz"],
    ids=lambda p: p.name.split(".")[0],
)
def test_decoding_by_category_keeps_exactly_what_decoding_every_event_keeps(source: Path, monkeypatch) -> None:
    """The fast path (a tagged union on `cat`: fields only for the categories a pass keeps) is
    taken for most runs of a real trace, and its columns equal those of decoding every event.
    Small blocks make many runs, most without a metadata event (those fall back)."""
    monkeypatch.setattr(trace_reader, "BLOCK_BYTES", 1 << 16)

    def read(refuse: bool) -> tuple[Columns, int]:
        counting = {
            keep: (_Counting(decoder, refuse), kept) for keep, (decoder, kept) in trace_reader.BY_CATEGORY.items()
        }
        monkeypatch.setattr(trace_reader, "BY_CATEGORY", counting)
        columns = read_columns(source)
        monkeypatch.undo()
        monkeypatch.setattr(trace_reader, "BLOCK_BYTES", 1 << 16)
        return columns, sum(wrapper.runs for wrapper, _ in counting.values())

    fast, fast_runs = read(refuse=False)
    every, none = read(refuse=True)
    assert none == 0 and fast_runs >= 10
    for which in ("device", "cpu"):
        for mine, theirs in zip(fast.arrays(which), every.arrays(which), strict=True):
            assert mine.tolist() == theirs.tolist()
    assert fast.names == every.names and fast.steps == every.steps and fast.cpu_tid == every.cpu_tid
    assert len(fast.device_ts) + len(fast.cpu_ts) > 10_000
