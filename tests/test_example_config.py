"""The shipped campaign.example.toml: valid as shipped, and its commented nodes block makes a
two-node campaign when uncommented."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import ROOT

from tasks.registry import UNITS
from tasks.session import Session


def test_the_shipped_example_config_is_valid_and_fits_its_own_requests() -> None:
    from tasks.config import load_config

    config, _ = load_config(ROOT / "campaign.example.toml", UNITS)
    assert config.service.max_model_len >= config.macro.input_tokens + config.macro.output_tokens
    assert config.host.kind == "ssh" and config.commands[0].id == "topology"


def test_the_example_nodes_block_uncommented_makes_a_two_node_campaign(tmp_path: Path) -> None:
    """What a user writes for two GPU hosts: each node's launch has its rank, address and role."""

    from orchestrate.main import host_for
    from tasks.config import load_config
    from tasks.host.results import HostFacts, NodeFacts
    from tasks.service.launch import launch_plan

    text = (ROOT / "campaign.example.toml").read_text()
    text = re.sub(r"^# (\[\[nodes\]\]|alias = \"gpu-|ip = |interface = |workdir = \"/scratch)", r"\1", text, flags=re.M)
    path = tmp_path / "campaign.toml"
    path.write_text(text)
    config, _ = load_config(path, UNITS)
    assert [node.alias for node in config.nodes] == ["gpu-a", "gpu-b"]
    session = Session(
        config=config,
        state_path=tmp_path / "state" / "todo.json",
        reports_dir=tmp_path,
        host_factory=lambda: host_for(config),
        node_host_factory=lambda i: host_for(config, i),
    )
    session.enabled = frozenset({"service", "profile"})
    assert session.multi_node and [n.workdir for n in session.nodes] == ["orchestrate-work", "/scratch/orchestrate"]
    node = NodeFacts(
        index=1, name="gpu-b", hostname="b", cpu_count=8, gpu_count=8, gpus=[], python="3", torch="2", vllm="0.26"
    )
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
        nodes=[node],
    )
    head, worker = (launch_plan(session, facts, n) for n in session.nodes)
    assert "--headless" not in head.argv and "--headless" in worker.argv
    assert worker.argv[worker.argv.index("--node-rank") + 1] == "1"
    assert worker.argv[worker.argv.index("--master-addr") + 1] == "10.0.0.11"
    assert head.env["VLLM_HOST_IP"] == "10.0.0.11" and worker.env["VLLM_HOST_IP"] == "10.0.0.12"
    assert worker.env["NCCL_SOCKET_IFNAME"] == "ens5" and worker.env["NCCL_NVLS_ENABLE"] == "0"
    assert worker.argv[worker.argv.index("--tensor-parallel-size") + 1] == "8"
    assert worker.argv[1] == "/scratch/orchestrate/scripts/vllm_cli.py"  # shipped by the launch, not by a plan
