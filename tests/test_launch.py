"""How the server is launched and stopped on a host: env_setup before every command, the GPU
server as the host python's module, NVLink multicast off, no secret in any written file, a
server group whose leader died, and the node whose server died first named."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import TINY_CONFIG, run_cli

from orchestrator.statefile import load_state
from tasks.registry import UNITS
from tasks.session import Session


def test_a_server_group_whose_leader_died_is_found_and_stopped(tmp_path: Path) -> None:
    """vLLM's API server (the group leader) dies; the engine and TP workers live on holding the
    accelerators. The lifecycle still owns the group and stops all of it."""
    import time

    from orchestrator.hosts.local import LocalHost
    from tasks.config import config_model
    from tasks.service.lifecycle import ServiceLifecycle

    config = config_model(UNITS).model_validate({"service": {"port": 1}})  # nothing listens on 1
    session = Session(
        config=config, state_path=tmp_path / "state" / "todo.json", reports_dir=tmp_path, host_factory=LocalHost
    )
    lifecycle = ServiceLifecycle(session)
    host = session.host()
    pid = host.start_detached(["sh", "-c", "sleep 300 & sleep 300 & exit 0"], str(tmp_path / "log"), lifecycle.pid_path)
    for _ in range(100):
        if not host.is_alive(pid):
            break
        time.sleep(0.05)
    orphans = host.group_pids(pid)
    assert not host.is_alive(pid) and len(orphans) == 2
    assert lifecycle.our_pid() == pid
    facts = lifecycle.ensure_stopped()
    assert facts["stopped_pid"] == pid and host.group_pids(pid) == []
    assert lifecycle.our_pid() is None


def test_env_setup_runs_before_every_host_command_and_its_failure_is_named(tmp_path: Path) -> None:
    """host.env_setup: a line a non-interactive SSH shell would otherwise never run (no rc file)."""
    from orchestrate.main import host_for
    from tasks.config import load_config

    path = tmp_path / "campaign.toml"
    path.write_text('[host]\nenv_setup = "export HF_HOME=/data/hf-cache; ORCH_UNEXPORTED=1"\n')
    config, _ = load_config(path, UNITS)
    host = host_for(config)
    assert host.run("echo $HF_HOME").stdout.strip() == "/data/hf-cache"
    assert host.run(["sh", "-c", "echo $HF_HOME"]).stdout.strip() == "/data/hf-cache"  # children inherit it
    host.env_setup = "false"
    broken = host.run("echo never", check=False)
    assert broken.exit_code == 97 and "host.env_setup failed" in broken.stderr and "never" not in broken.stdout


def test_a_gpu_server_starts_as_the_host_pythons_module_and_keeps_the_hosts_hub_settings(tmp_path: Path) -> None:
    from tasks.config import load_config
    from tasks.host.results import HostFacts
    from tasks.service.launch import launch_plan
    from tasks.session import Session

    path = tmp_path / "campaign.toml"
    path.write_text('[host]\npython = "/opt/venv/bin/python"\n[service]\nmodel = "/models/m"\n')
    config, _ = load_config(path, UNITS)
    session = Session(config=config, state_path=tmp_path / "todo.json", reports_dir=tmp_path, host_factory=lambda: None)
    facts = HostFacts(
        uname="",
        cpu="",
        cpu_count=8,
        accelerator="cuda",
        accelerator_source="config",
        gpu_count=8,
        gpus=[],
        driver=None,
        topology=None,
        python="3",
        torch="2",
        vllm="0.26",
        artifact="",
    )
    plan = launch_plan(session, facts)
    assert plan.argv[:5] == ["/opt/venv/bin/python", "-m", "vllm.entrypoints.cli.main", "serve", "/models/m"]
    assert "HF_HUB_OFFLINE" not in plan.env  # a configured model follows the host's own hub settings


def test_nvlink_multicast_is_off_for_every_server_on_a_cuda_host_unless_the_user_turns_it_on(tmp_path: Path) -> None:
    """NVLS on a host whose GPUs others share can take them out of service: off by default on
    CUDA (vLLM's own launch and a custom `service.command`), nothing added on CPU, and a user's
    `service.env` wins."""
    from tasks.collective_env import NVLINK_MULTICAST_OFF
    from tasks.config import load_config
    from tasks.host.results import HostFacts
    from tasks.service.launch import launch_plan
    from tasks.session import Session

    def plan_for(service: str, accelerator: str):
        path = tmp_path / "campaign.toml"
        path.write_text(f'[service]\nmodel = "/models/m"\n{service}')
        config, _ = load_config(path, UNITS)
        session = Session(
            config=config, state_path=tmp_path / "todo.json", reports_dir=tmp_path, host_factory=lambda: None
        )
        facts = HostFacts(
            uname="",
            cpu="",
            cpu_count=8,
            accelerator=accelerator,
            accelerator_source="config",
            gpu_count=8 if accelerator == "cuda" else 0,
            gpus=[],
            driver=None,
            topology=None,
            python="3",
            torch="2",
            vllm="0.26",
            artifact="",
        )
        return launch_plan(session, facts)

    assert plan_for("", "cuda").env.items() >= NVLINK_MULTICAST_OFF.items()
    assert plan_for('command = ["my-serve", "{model}"]\n', "cuda").env.items() >= NVLINK_MULTICAST_OFF.items()
    assert not set(plan_for("", "cpu").env) & set(NVLINK_MULTICAST_OFF)
    chosen = plan_for('env = { NCCL_NVLS_ENABLE = "1" }\n', "cuda").env
    assert chosen["NCCL_NVLS_ENABLE"] == "1" and chosen["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"


@pytest.mark.heavy
def test_a_secret_in_service_env_is_in_no_written_file(tmp_path: Path) -> None:
    """The server's launch fails (an injected fault: its command exits at once), so the secret
    passes through the launch, the failure message and the log tail: it must land nowhere."""
    secret = "hf_topsecret_0123456789"
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(TINY_CONFIG))
    (tmp_path / "campaign.toml").write_text(
        textwrap.dedent(f"""\
        [campaign]
        name = "secret"
        phases = ["service"]
        [service]
        model = "{model}"
        port = 1
        command = ["sh", "-c", "echo starting with $HF_TOKEN set; exit 3"]
        env = {{ HF_TOKEN = "{secret}" }}
        """)
    )
    result = run_cli(["resume"], tmp_path, timeout=120)
    assert result.returncode == 1
    todo = load_state(tmp_path / "state" / "todo.json").by_id()["service_ready"]
    assert todo.status == "failed" and "exited during start" in todo.error.message
    assert todo.inputs["service"]["env"]["HF_TOKEN"].startswith("sha256:")
    assert secret not in result.stdout + result.stderr
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.name != "campaign.toml"]
    leaked = [p for p in written if secret.encode() in p.read_bytes()]
    # The server's own log is the host's business (vLLM may print its environment); ours hold none.
    assert [p.name for p in leaked if p.name != "vllm.log"] == []


def test_with_several_nodes_gone_the_one_whose_server_died_first_is_named(tmp_path: Path) -> None:
    """Node 1's server is killed and the head's exits after it: both are gone by the next poll.
    The failure names node 1 (its log stopped first) with its own log, then the head. Both
    "nodes" are this machine (real pid files of exited processes, real logs with set times)."""
    import os

    from orchestrator.errors import TaskFailed
    from orchestrator.hosts.local import LocalHost
    from tasks.config import load_config
    from tasks.service.launch import service_log_path, service_pid_path
    from tasks.service.node_deaths import fail_if_node_died

    path = tmp_path / "campaign.toml"
    path.write_text(
        textwrap.dedent(f"""\
        [host]
        kind = "ssh"
        python = "{sys.executable}"
        [[nodes]]
        alias = "head"
        ip = "10.0.0.11"
        interface = "eth0"
        workdir = "{tmp_path / "node0"}"
        [[nodes]]
        alias = "worker"
        ip = "10.0.0.12"
        interface = "eth0"
        workdir = "{tmp_path / "node1"}"
        [service]
        model = "/models/m"
        tensor_parallel = 2
        """)
    )
    config, _ = load_config(path, UNITS)
    session = Session(
        config=config,
        state_path=tmp_path / "todo.json",
        reports_dir=tmp_path,
        host_factory=LocalHost,
        node_host_factory=lambda index: LocalHost(),
    )
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    ).stdout.strip()  # a pid no process has now
    for node, (died_at, last_line) in zip(
        session.nodes, [(2000.0, "EngineDeadError: the engine died"), (1000.0, "(Worker_TP1) decoding")], strict=True
    ):
        for file, text in ((service_pid_path(session, node), gone), (service_log_path(session, node), last_line)):
            Path(file).parent.mkdir(parents=True, exist_ok=True)
            Path(file).write_text(text + "\n")
        os.utime(service_log_path(session, node), (died_at, died_at))
    try:
        fail_if_node_died(session, "during the c=1 run")
        raise AssertionError("no failure with both nodes gone")
    except TaskFailed as failed:
        assert str(failed).startswith("vLLM on node 1 (worker) exited during the c=1 run; then on node 0 (head)"), str(
            failed
        )
        assert "Worker_TP1" in failed.output_tail and "EngineDeadError" not in failed.output_tail
