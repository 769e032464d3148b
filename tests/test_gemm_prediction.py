"""The micro-predicted GEMM time a step (tasks/decisions/gemm_prediction.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_routed_experts_are_predicted_from_the_fused_rows_when_timed_else_per_expert() -> None:
    """Kimi-K2 shapes cut to 4 layers (3 MoE): one fused-MoE call a MoE layer when its row was
    timed; without it, each expert's GEMM alone, top-k of them a layer; the what-if W4A16 rows
    never count."""
    import sys

    from tasks.decisions.gemm_prediction import predict_gemm
    from tasks.gemm.results import GemmResult
    from tasks.model.shapes import model_shapes

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks.gpu_model_shapes import shape

    shapes = model_shapes(shape("kimik2_4layer_int4", {}), 1)
    rows = [
        {**row, "device": "cuda", "rotated_copies": 1, "us": 100.0 if row.get("experts") else 10.0}
        for row in shapes.gemm_rows([1])
    ]
    rows.append({**rows[0], "name": rows[0]["name"] + " (as W4A16)", "us": 1e6})
    info = {"device": "cuda", "torch": "2.11", "device_name": "H200", "threads": 1}
    gemm = GemmResult(info=info, copy_ceiling_gbps=4000.0, rows=rows, artifact="gemm.json")
    fused = predict_gemm(shapes, gemm, 1.0, experts=True)
    assert fused.fused and fused.calls_per_step == pytest.approx(3.0) and fused.ms_per_step == pytest.approx(0.3)
    per_expert = predict_gemm(
        shapes,
        GemmResult(
            info=info,
            copy_ceiling_gbps=4000.0,
            artifact="gemm.json",
            rows=[row for row in rows if not row.get("experts")],
        ),
        1.0,
        experts=True,
    )
    assert not per_expert.fused and per_expert.calls_per_step == pytest.approx(2 * 8 * 3)
    dense = predict_gemm(shapes, gemm, 1.0, experts=False)
    assert dense.ms_per_step < 1.0 and "experts_fused" not in dense.missing
