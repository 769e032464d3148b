"""lower_tp's GEMM term against what the experiment traced: for each todo file of a campaign whose
lower_tp experiment ran with a trace, the traced GEMM (and MoE) time a step at TP and at TP/2, the
GEMM micro's difference between its TP/2 rows and today's (what the rules use now), and the traced
time x the micro's ratio (what they used before).

usage: python benchmarks/half_tp_gemm_check.py TODO_JSON...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tasks.decisions.gemm_prediction import HALF_TP, predict_gemm
from tasks.gemm.results import GemmResult
from tasks.model.shapes import ModelShapes


def traced_ms(rank: dict, category: str) -> float:
    inside = rank["categories"].get(category, {}).get("ms_per_step", 0.0)
    between = ((rank.get("between_steps") or {}).get("categories") or {}).get(category)
    return inside + (between["ms_per_step"] if between else 0.0)


def main() -> None:
    print("| todo | traced GEMM ms, TP -> TP/2 | traced change | micro difference | traced x micro ratio |")
    print("|---|---|---|---|---|")
    for path in sys.argv[1:]:
        todos = {t["id"]: t for t in json.loads(Path(path).read_text())["todos"]}
        variant = todos.get("exp_lower_tp_analysis_breakdown", {}).get("result")
        if not variant:
            continue
        gemm = GemmResult.model_validate(todos["gemm_bench"]["result"])
        shapes = ModelShapes.model_validate(todos["model_facts"]["result"]["shapes"])
        base_rank, half_rank = todos["analysis_breakdown"]["result"]["ranks"][0], variant["ranks"][0]
        base = traced_ms(base_rank, "gemm") + traced_ms(base_rank, "moe")
        half = traced_ms(half_rank, "gemm") + traced_ms(half_rank, "moe")
        micro = []
        for suffix in ("", HALF_TP):
            parts = [predict_gemm(shapes, gemm, 1, experts=e, variant=suffix) for e in (False, True)]
            micro.append(sum(p.ms_per_step for p in parts if p and not p.missing))
        if not micro[0] or not micro[1]:
            print(f"| {path} | {base:.3f} -> {half:.3f} | {half - base:+.3f} | no TP/2 rows | - |")
            continue
        print(
            f"| {path} | {base:.3f} -> {half:.3f} | {half - base:+.3f} | {micro[1] - micro[0]:+.3f}"
            f" | {base * (micro[1] / micro[0] - 1):+.3f} |"
        )


if __name__ == "__main__":
    main()
