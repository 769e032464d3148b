"""Typed results of the `profile` phase: which trace files a capture left, and where."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from orchestrator.refs import TaskRef
from tasks.macro.energy import Telemetry
from tasks.macro.results import Distribution
from tasks.models import Result


class CaptureLoad(Result):
    """The load that ran while the profiler recorded: its TPOT is the profiled TPOT."""

    requests: int
    duration_s: float
    concurrency: int = 1
    failed: int = 0
    tpot_ms: Distribution | None = None
    telemetry: Telemetry | None = Field(None, description="power and clocks while the profiler recorded")
    output_tokens: int | None = None


class PendingCapture(Result):
    """Written after the host wrote its traces and before they are fetched: a retry fetches
    these instead of capturing again."""

    ranks: dict[str, str] = Field(description="rank -> trace file name on the host")
    nodes: dict[str, int] = Field(default_factory=dict, description="multi-node: rank -> the node that wrote it")
    node_names: dict[str, str] = Field(default_factory=dict, description="multi-node: node index -> its name")
    stop_profile_s: float
    load: CaptureLoad | None = None


class CaptureManifest(PendingCapture):
    files: dict[str, int] = Field(description="file name -> bytes, as fetched")
    requests: int
    output_tokens: int
    input_tokens: int
    concurrency: int = Field(1, description="requests in flight while recording")
    folder: str = Field(description="where the fetched traces are, on this machine")

    def trace_paths(self) -> dict[int, Path]:
        return {int(rank): Path(self.folder) / name for rank, name in self.ranks.items()}


PROFILE_CAPTURE = TaskRef("profile_capture", CaptureManifest)
