"""The all-reduce phase runs under the server's communication settings: a real torchrun of the
bench (gloo, and vLLM's shared-memory all-reduce where its CPU library for this CPU has one) through
`orchestrate resume`."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from conftest import run_cli, vllm_cpu_has_shm_allreduce

from orchestrator.statefile import load_state

pytestmark = pytest.mark.slow


def test_the_bench_runs_with_the_servers_service_env_and_the_findings_say_so(tmp_path: Path, tiny_model: Path) -> None:
    """What the ranks saw is recorded by the ranks themselves (their os.environ), so a setting
    lost on the way (the bench started with its own environment) fails this."""
    (tmp_path / "campaign.toml").write_text(
        textwrap.dedent(f"""\
        [campaign]
        name = "comm"
        phases = ["allreduce"]
        [service]
        model = "{tiny_model}"
        env = {{ NCCL_DEBUG = "WARN", TORCH_SYMM_MEM_DISABLE_MULTICAST = "1", HF_TOKEN = "not-a-collective-setting" }}
        [allreduce]
        decode_tokens = [1]
        sweep_min_bytes = 4096
        sweep_max_bytes = 4096
        iterations = 5
        """)
    )
    segments = set(Path("/dev/shm").glob("orchestrate-*-cpushm_*"))
    done = run_cli(["resume", "--no-check"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    result = load_state(tmp_path / "state" / "todo.json").by_id()["allreduce_bench"].result
    # vLLM's shared-memory all-reduce was timed where vLLM's CPU library for this CPU has it (the
    # AVX-512 builds; the AVX2 one has none, and vLLM's server uses gloo then), and its segments
    # (4 MB a rank) are gone afterwards
    if vllm_cpu_has_shm_allreduce():
        assert result["runs"][0]["vllm_shm_rows"]
    else:
        why = result["runs"][0]["vllm_shm_unavailable"]
        assert "no shared-memory all-reduce" in why
        assert why in next((tmp_path / "reports").rglob("findings.md")).read_text()
    assert set(Path("/dev/shm").glob("orchestrate-*-cpushm_*")) <= segments
    seen = result["runs"][0]["collective_env"]
    assert seen["NCCL_DEBUG"] == "WARN" and seen["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert "HF_TOKEN" not in seen and "NCCL_NVLS_ENABLE" not in seen  # no CUDA defaults on a CPU host
    findings = next((tmp_path / "reports").rglob("findings.md")).read_text()
    assert "`NCCL_DEBUG=WARN`" in findings and "`TORCH_SYMM_MEM_DISABLE_MULTICAST=1`" in findings
