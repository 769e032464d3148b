"""Arrival traces (tasks/macro/traces.py): the shipped samples in both formats, the schedule's
offsets exact under speed and duration, every malformed row named by its file and line; and a
replay against the known-pace fake server (a fake on purpose: its pace is known, so the achieved
rate and the latencies can be checked) that sends at the trace's rate."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import ROOT, run_cli
from test_serving_paced import paced_campaign

from orchestrator.errors import InputError
from orchestrator.statefile import load_state
from tasks.macro.traces import read_trace

SAMPLES = ROOT / "tasks" / "macro" / "samples"


def test_both_samples_parse_to_the_same_arrivals() -> None:
    azure = read_trace(SAMPLES / "azure_sample.csv")
    mooncake = read_trace(SAMPLES / "mooncake_sample.jsonl")
    assert (azure.format, mooncake.format) == ("azure", "mooncake")
    assert len(azure.arrivals) == len(mooncake.arrivals) == 40
    for a, m in zip(azure.arrivals, mooncake.arrivals, strict=True):
        assert (a.input_tokens, a.output_tokens) == (m.input_tokens, m.output_tokens)
        assert a.offset_s == pytest.approx(m.offset_s, abs=0.001)  # Mooncake keeps milliseconds
    assert azure.arrivals[0].offset_s == 0.0 and azure.rate_per_s == pytest.approx(39 / azure.span_s)
    assert azure.shared_block_pct is None and 0 < mooncake.shared_block_pct < 100


def test_speed_and_duration_scale_the_schedule_exactly(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(
        "".join(
            json.dumps({"timestamp": t, "input_length": 8, "output_length": 4}) + "\n" for t in (1000, 1500, 3000, 9000)
        )
    )
    assert [a.offset_s for a in read_trace(path).arrivals] == [0.0, 0.5, 2.0, 8.0]
    assert [a.offset_s for a in read_trace(path, speed=2.0).arrivals] == [0.0, 0.25, 1.0, 4.0]
    assert [a.offset_s for a in read_trace(path, speed=2.0, duration_s=1.0).arrivals] == [0.0, 0.25, 1.0]


@pytest.mark.parametrize(
    "name, text, message",
    [
        ("t.csv", "TIMESTAMP,ContextTokens\n1,2\n", "t.csv:1: the header lacks GeneratedTokens"),
        (
            "t.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n1,2,3\n2,x,3\n",
            "t.csv:3: ContextTokens 'x' is not a whole number",
        ),
        ("t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n1,2,3\n2,5\n", "t.csv:3: 2 columns, not the header's"),
        ("t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,2,3\n", "t.csv:2: TIMESTAMP 'yesterday'"),
        ("t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n1,0,3\n", "t.csv:2: ContextTokens 0 is below 1"),
        ("t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n", "t.csv: no arrivals"),
        (
            "t.jsonl",
            '{"timestamp": 1, "input_length": 2, "output_length": 3}\n{"timestamp": 2,\n',
            "t.jsonl:2: not a JSON object",
        ),
        ("t.jsonl", '{"timestamp": 1, "input_length": 2}\n', "t.jsonl:1: lacks output_length"),
        (
            "t.jsonl",
            '{"timestamp": "1", "input_length": 2, "output_length": 3}\n',
            "t.jsonl:1: timestamp '1' is not milliseconds",
        ),
        (
            "t.jsonl",
            '{"timestamp": 1, "input_length": 2, "output_length": 3, "hash_ids": "a"}\n',
            "t.jsonl:1: hash_ids is not a list",
        ),
        ("t.jsonl", "[1, 2]\n", "t.jsonl:1: not a JSON object"),
        ("t.txt", "1 2 3\n", "not a trace format this reads"),
    ],
)
def test_a_malformed_row_is_named_by_its_line(tmp_path: Path, name: str, text: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(InputError, match=re.escape(message)):
        read_trace(path)


@pytest.mark.heavy
def test_the_replay_sends_at_the_traces_rate(tmp_path: Path, pace_server) -> None:
    write_config = paced_campaign(tmp_path, pace_server(ttft_ms=5, pace_ms=2))
    write_config(16, macro_extra=f'trace = "{SAMPLES / "azure_sample.csv"}"\ntrace_duration_s = 8.0\n')
    result = run_cli(["resume"], tmp_path, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    replayed = load_state(tmp_path / "state" / "todo.json").by_id()["macro_replay"].result
    expected = read_trace(SAMPLES / "azure_sample.csv", duration_s=8.0)
    assert replayed["arrivals"] == len(expected.arrivals) and replayed["level"]["failed"] == 0
    assert replayed["achieved_rate_per_s"] == pytest.approx(expected.rate_per_s, rel=0.05)
    assert replayed["lateness_ms"]["p99"] < 50
    findings = (tmp_path / "reports" / "paced" / "findings.md").read_text()
    assert "**Trace replay**" in findings and "| azure_sample.csv | azure |" in findings
