"""The load client's timing against a server that streams at a known pace (a deliberate fake,
for ground truth), and the metric definitions against hand-made records."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy
import pytest

from tasks.macro.metrics import percentile, summarize, tpot_s

ROOT = Path(__file__).resolve().parent.parent
LOADGEN = ROOT / "tasks" / "macro" / "remote" / "loadgen.py"


def run_loadgen(port: int, concurrency: int, requests: int, output_tokens: int, *extra: str) -> dict:
    out = subprocess.run([sys.executable, str(LOADGEN), "--port", str(port), "--model", "m",
                          "--concurrency", str(concurrency), "--requests", str(requests),
                          "--output-tokens", str(output_tokens), "--warmup", "0", *extra],
                         capture_output=True, text=True, check=True, timeout=300).stdout
    return json.loads(out)


def server_truth(port: int) -> list[dict]:
    return json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/stats").read())


@pytest.mark.parametrize("concurrency", [1, 16])
def test_client_timing_matches_a_known_pace(pace_server, concurrency: int) -> None:
    port = pace_server(ttft_ms=40, pace_ms=10)
    run = run_loadgen(port, concurrency, requests=2 * concurrency, output_tokens=30)
    summary = summarize(run)
    assert summary["failed"] == 0 and summary["completed"] == 2 * concurrency
    assert summary["output_tokens"] == 30 * 2 * concurrency  # from usage, not from chunks
    truth = [r["tpot_s"] * 1000 for r in server_truth(port)]
    truth_mean = sum(truth) / len(truth)
    assert summary["tpot_ms"]["mean"] == pytest.approx(truth_mean, rel=0.02)
    assert summary["tpot_ms"]["mean"] == pytest.approx(10, rel=0.1)
    assert summary["ttft_ms"]["p50"] == pytest.approx(40, abs=8)
    assert summary["itl_ms"]["count"] == 29 * 2 * concurrency


def test_a_delivery_stall_is_counted_and_the_tail_after_the_last_token_is_not(pace_server) -> None:
    # Injected faults: each stream pauses 300 ms halfway and waits 400 ms before usage/[DONE].
    port = pace_server(ttft_ms=10, pace_ms=5, stall_ms=300, tail_ms=400)
    run = run_loadgen(port, 2, requests=4, output_tokens=21)
    summary = summarize(run)
    truth = [r["tpot_s"] * 1000 for r in server_truth(port)]
    # vLLM's TPOT: (last token chunk - first) / (n - 1), stall included, tail excluded.
    assert summary["tpot_ms"]["mean"] == pytest.approx(sum(truth) / len(truth), rel=0.03)
    assert summary["tpot_ms"]["mean"] == pytest.approx((20 * 5 + 300) / 20, rel=0.1)
    assert all(r["stream_end_s"] - r["e2e_s"] >= 0.38 for r in run["requests"])
    stalls = summary["stalls"]
    assert 50 <= stalls["threshold_ms"] < 60
    # Every request shows its injected stall (a busy CI host may add a hiccup of its own).
    assert stalls["requests_affected"] == 4 and stalls["count"] >= 4
    assert all(max(r["itl_s"]) > 0.28 for r in run["requests"]) and stalls["max_ms"] < 400


def test_failures_are_counted_not_hidden(pace_server) -> None:
    port = pace_server(ttft_ms=5, pace_ms=1, fail_every=3)
    summary = summarize(run_loadgen(port, 2, requests=9, output_tokens=5))
    assert summary["failed"] == 3 and summary["completed"] == 6
    assert "HTTP 500" in summary["failure_examples"][0]
    assert summary["tpot_ms"]["count"] == 6


def test_tpot_definition_and_percentiles() -> None:
    record = {"ttft_s": 0.100, "e2e_s": 1.090, "output_tokens": 100, "itl_s": [], "error": None}
    assert tpot_s(record) == pytest.approx(0.010)
    assert tpot_s({**record, "output_tokens": 1}) is None
    values = [3.0, 1.0, 4.0, 1.5, 9.0, 2.6, 5.3]
    ordered = sorted(values)
    for fraction in (0.5, 0.9, 0.99):
        assert percentile(ordered, fraction) == pytest.approx(numpy.percentile(values, fraction * 100))


@pytest.mark.parametrize("new_session", [False, True])
def test_client_says_whether_it_shares_the_servers_session(pace_server, tmp_path: Path, new_session: bool) -> None:
    port = pace_server(ttft_ms=5, pace_ms=1, new_session=new_session)
    pid_file = tmp_path / "server.pid"
    pid_file.write_text(str(pace_server.processes[-1].pid))
    scheduling = summarize(run_loadgen(port, 1, 2, 5, "--server-pid-file", str(pid_file)))["scheduling"]
    autogroup = Path("/proc/sys/kernel/sched_autogroup_enabled")
    assert scheduling["autogroup_enabled"] == (autogroup.read_text().strip() == "1" if autogroup.exists() else None)
    assert scheduling["server_sid"] is not None
    assert (scheduling["server_sid"] != scheduling["client_sid"]) is new_session
