"""The capture's trace files: which are rank traces, a reused capture, ranks named in new ways, ranks that write nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tasks.profile.capture import rank_traces, safe_manifest
from tasks.profile.results import CaptureManifest


def test_capture_finds_dense_and_moe_rank_traces_not_the_api_servers() -> None:
    files = {
        "rank0.100.pt.trace.json.gz": 5,
        "rank1.101.pt.trace.json.gz": 5,
        "host_77.async_llm.102.pt.trace.json.gz": 9,
    }
    assert rank_traces(files, 2) == {0: "rank0.100.pt.trace.json.gz", 1: "rank1.101.pt.trace.json.gz"}
    moe = {
        "dp0_pp0_tp0_dcp0_ep0_rank0.200.pt.trace.json.gz": 5,
        "dp0_pp0_tp1_dcp0_ep1_rank1.201.pt.trace.json.gz": 5,
        "h_1.async_llm.202.pt.trace.json.gz": 9,
    }
    assert rank_traces(moe, 2) == {
        0: "dp0_pp0_tp0_dcp0_ep0_rank0.200.pt.trace.json.gz",
        1: "dp0_pp0_tp1_dcp0_ep1_rank1.201.pt.trace.json.gz",
    }
    assert rank_traces(moe, 4) == rank_traces(moe, 2)  # ranks 2 and 3 not written yet


def test_an_earlier_capture_is_reused_only_whole_and_with_the_same_settings(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    (traces / "rank0.1.pt.trace.json.gz").write_bytes(b"x" * 10)
    settings = {"requests": 4, "output_tokens": 32, "input_tokens": 64}
    manifest = CaptureManifest(
        ranks={"0": "rank0.1.pt.trace.json.gz"},
        stop_profile_s=1.0,
        files={"rank0.1.pt.trace.json.gz": 10},
        folder=str(traces),
        **settings,
    )
    (tmp_path / "manifest.json").write_text(manifest.model_dump_json())
    assert safe_manifest(tmp_path, settings) == manifest
    assert safe_manifest(tmp_path, {**settings, "output_tokens": 64}) is None  # other settings
    (traces / "rank0.1.pt.trace.json.gz").write_bytes(b"x" * 4)  # a partial fetch
    assert safe_manifest(tmp_path, settings) is None
    (tmp_path / "manifest.json").write_text(json.dumps({"files": {}}))  # another version's
    assert safe_manifest(tmp_path, settings) is None


def _local_session(tmp_path: Path):
    from orchestrator.hosts.local import LocalHost
    from tasks.config import config_model
    from tasks.registry import UNITS
    from tasks.session import Session

    config = config_model(UNITS).model_validate({"host": {"workdir": str(tmp_path)}})
    return Session(
        config=config, state_path=tmp_path / "state" / "todo.json", reports_dir=tmp_path, host_factory=LocalHost
    )


def _trace(path: Path, rank: int) -> None:
    import gzip

    document = {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
        "traceEvents": [],
    }
    path.write_bytes(gzip.compress(json.dumps(document).encode()))


def test_capture_reads_the_rank_of_a_trace_named_in_a_new_way(tmp_path: Path) -> None:
    from tasks.profile.capture import await_rank_traces

    session = _local_session(tmp_path)
    traces = tmp_path / "traces"
    traces.mkdir()
    _trace(traces / "old.1.pt.trace.json.gz", 0)  # there before the capture: not ours
    _trace(traces / "worker_b.7.pt.trace.json.gz", 1)
    _trace(traces / "worker_a.7.pt.trace.json.gz", 0)
    _trace(traces / "h_1.async_llm.7.pt.trace.json.gz", 0)  # the API server's, never a rank
    found = await_rank_traces(session, {"old.1.pt.trace.json.gz"}, 2, appear_s=5)
    assert found == {0: "worker_a.7.pt.trace.json.gz", 1: "worker_b.7.pt.trace.json.gz"}


@pytest.mark.heavy
def test_capture_fails_soon_listing_what_it_found_when_a_rank_writes_nothing(tmp_path: Path) -> None:
    import time

    from orchestrator.errors import TaskFailed
    from tasks.profile.capture import await_rank_traces

    session = _local_session(tmp_path)
    traces = tmp_path / "traces"
    traces.mkdir()
    _trace(traces / "rank0.5.pt.trace.json.gz", 0)
    started = time.monotonic()
    with pytest.raises(TaskFailed, match=r"only ranks \[0\] of 2 .*rank0\.5\.pt\.trace\.json\.gz"):
        await_rank_traces(session, set(), 2, appear_s=2)
    assert time.monotonic() - started < 10
