"""The campaign's key figures, read once from the typed results; the cross-phase sections and
the decision rules use these (names are the rule file's vocabulary)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from tasks.allreduce.results import ALLREDUCE_BENCH, AllreduceResult
from tasks.analysis.results import ANALYSIS_BREAKDOWN, Breakdown, RankBreakdown
from tasks.gemm.results import GEMM_BENCH, GemmResult, GemmRow
from tasks.host.results import HOST_FACTS, HostFacts
from tasks.macro.results import MACRO_SINGLE, MACRO_SWEEP, MacroSingle, MacroSweep
from tasks.model.results import MODEL_FACTS, ModelFacts
from tasks.profile.results import PROFILE_CAPTURE, CaptureManifest
from tasks.view import Findings


@dataclass
class KeyFigures:
    tp: int
    rank0: RankBreakdown | None
    breakdown: Breakdown | None
    model: ModelFacts | None
    host: HostFacts | None
    gemm: GemmResult | None
    allreduce: AllreduceResult | None
    decode_tpot_ms: float | None
    tpot_by_concurrency: dict[int, float] = field(default_factory=dict)
    """Mean TPOT without the profiler at each concurrency served (single stream and sweep levels)."""
    capture: CaptureManifest | None = None
    single: MacroSingle | None = None
    sweep: MacroSweep | None = None
    memo: dict = field(default_factory=dict, repr=False)
    """Derived figures computed once a view (the n-gram replay)."""

    def share(self, category: str) -> float | None:
        if self.rank0 is None:
            return None
        figures = self.rank0.categories.get(category)
        return figures.share_pct if figures else 0.0

    @property
    def dominant_category(self) -> str | None:
        return self.rank0.dominant_category() if self.rank0 else None

    def tpot_spread_pct(self, concurrency: int) -> float | None:
        """The spread of the runs' mean TPOT at a concurrency (single stream for 1), % of the median."""
        levels = ([self.single.single_stream] if self.single else []) + (self.sweep.levels if self.sweep else [])
        for level in levels:
            if level.concurrency == concurrency and level.noise:
                return level.noise.tpot_ms_mean.spread_pct
        return None

    @property
    def capture_concurrency(self) -> int:
        load = self.capture.load if self.capture else None
        return load.concurrency if load else 1

    @property
    def profiled_tpot_ms(self) -> float | None:
        """Mean TPOT of the requests the profiler recorded."""
        load = self.capture.load if self.capture else None
        return load.tpot_ms.mean if load and load.tpot_ms else None

    @property
    def capture_tpot_ms(self) -> float | None:
        """TPOT at the capture's concurrency without the profiler, else with it: what the
        decisions' predicted changes are relative to."""
        return self.tpot_by_concurrency.get(self.capture_concurrency) or self.profiled_tpot_ms


def key_figures(findings: Findings) -> KeyFigures:
    """The figures every section and the decision record read, computed once a view (a findings
    document asked for them four times, each validating every stored result again)."""
    if "key_figures" not in findings.cache:
        findings.cache["key_figures"] = _key_figures(findings)
    return findings.cache["key_figures"]


def _key_figures(findings: Findings) -> KeyFigures:
    breakdown = findings.result(ANALYSIS_BREAKDOWN)
    single = findings.result(MACRO_SINGLE)
    sweep = findings.result(MACRO_SWEEP)
    tpot = {
        level.concurrency: level.tpot_ms.mean
        for level in (sweep.levels if sweep else [])
        if level.tpot_ms.mean is not None
    }
    if single and single.single_stream.tpot_ms.mean is not None:
        tpot[1] = single.single_stream.tpot_ms.mean  # the single-stream run is the c=1 reference
    model = findings.result(MODEL_FACTS)
    return KeyFigures(
        tp=model.shapes.tensor_parallel if model and model.shapes else findings.session.config.service.tensor_parallel,
        rank0=breakdown.ranks[0] if breakdown and breakdown.ranks else None,
        breakdown=breakdown,
        model=model,
        host=findings.result(HOST_FACTS),
        gemm=findings.result(GEMM_BENCH),
        allreduce=findings.result(ALLREDUCE_BENCH),
        decode_tpot_ms=single.single_stream.tpot_ms.mean if single else None,
        tpot_by_concurrency=tpot,
        capture=findings.result(PROFILE_CAPTURE),
        single=single,
        sweep=sweep,
    )


def w4a16_speedup(rows: list[GemmRow]) -> float | None:
    """Median over M=1 shapes of bf16 time / W4A16 time."""
    by_shape: dict[tuple[int, int, int], dict[str, float]] = {}
    for row in rows:
        if row.us is not None and row.m == 1:
            by_shape.setdefault((row.m, row.k, row.n), {})[row.dtype] = row.us
    ratios = [v["bf16"] / v["w4a16"] for v in by_shape.values() if "bf16" in v and "w4a16" in v]
    return statistics.median(ratios) if ratios else None
