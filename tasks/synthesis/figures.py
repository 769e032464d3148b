"""The campaign's key figures, read once from the typed results; the cross-phase sections and
the decision rules use these (names are the rule file's vocabulary)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from tasks.allreduce.results import AllreduceResult
from tasks.analysis.results import Breakdown, RankBreakdown
from tasks.gemm.results import GemmResult, GemmRow
from tasks.host import HostFacts
from tasks.macro.results import MacroSingle, MacroSweep
from tasks.model import ModelFacts
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

    def share(self, category: str) -> float | None:
        if self.rank0 is None:
            return None
        figures = self.rank0.categories.get(category)
        return figures.share_pct if figures else 0.0

    @property
    def dominant_category(self) -> str | None:
        return self.rank0.dominant_category() if self.rank0 else None

    def rule_inputs(self) -> dict[str, float | None]:
        """The figures the decision rules may name; None where this campaign did not measure it."""
        quantized = None if self.model is None else (1 if self.model.weight_dtype != "bf16" else 0)
        cuda = None if self.host is None else (1 if self.host.accelerator == "cuda" else 0)
        return {"tp": self.tp, "comm_share_pct": self.share("communication"),
                "gemm_share_pct": self.share("gemm"), "attention_share_pct": self.share("attention"),
                "moe_share_pct": self.share("moe"), "quantized": quantized,
                "decode_tpot_ms": self.decode_tpot_ms,
                "w4a16_vs_bf16_speedup": w4a16_speedup(self.gemm.rows) if self.gemm else None,
                "cuda": cuda}


def key_figures(findings: Findings) -> KeyFigures:
    breakdown = findings.result("analysis_breakdown", Breakdown)
    single = findings.result("macro_single", MacroSingle)
    sweep = findings.result("macro_sweep", MacroSweep)
    tpot = {level.concurrency: level.tpot_ms.mean for level in (sweep.levels if sweep else [])
            if level.tpot_ms.mean is not None}
    if single and single.single_stream.tpot_ms.mean is not None:
        tpot[1] = single.single_stream.tpot_ms.mean  # the single-stream run is the c=1 reference
    return KeyFigures(
        tp=findings.session.config.service.tensor_parallel,
        rank0=breakdown.ranks[0] if breakdown and breakdown.ranks else None,
        breakdown=breakdown,
        model=findings.result("model_facts", ModelFacts),
        host=findings.result("host_facts", HostFacts),
        gemm=findings.result("gemm_bench", GemmResult),
        allreduce=findings.result("allreduce_bench", AllreduceResult),
        decode_tpot_ms=single.single_stream.tpot_ms.mean if single else None,
        tpot_by_concurrency=tpot,
    )


def w4a16_speedup(rows: list[GemmRow]) -> float | None:
    """Median over M=1 shapes of bf16 time / W4A16 time."""
    by_shape: dict[tuple[int, int, int], dict[str, float]] = {}
    for row in rows:
        if row.us is not None and row.m == 1:
            by_shape.setdefault((row.m, row.k, row.n), {})[row.dtype] = row.us
    ratios = [v["bf16"] / v["w4a16"] for v in by_shape.values() if "bf16" in v and "w4a16" in v]
    return statistics.median(ratios) if ratios else None
