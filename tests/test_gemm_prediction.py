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


def test_the_gemms_at_half_the_tp_measured_by_the_micro_stand_in_for_the_assumed_factor() -> None:
    """lower_tp's added GEMM time from the micro's rows at the TP/2 shapes (timed as such a rank
    runs them), in place of the traced GEMM time x the rules file's assumed factor 2.0; the what-if
    rows never count as today's. Made-up timings, so the difference is known: today's rows 10 µs
    each, the TP/2 rows 13 µs."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks.gpu_model_shapes import shape
    from tasks.decisions.estimates import half_tp_extra_assumed, half_tp_extra_ms, rule_figures
    from tasks.decisions.figures import KeyFigures
    from tasks.decisions.gemm_prediction import HALF_TP, predict_gemm
    from tasks.decisions.rules import load_rules
    from tasks.decisions.vocabulary import provenance
    from tasks.gemm.results import GemmResult
    from tasks.model.results import ModelFacts
    from tasks.model.shapes import model_shapes

    config = shape("llama8b_bf16", {})
    today, half = model_shapes(config, 2), model_shapes(config, 1)
    rows = [{**row, "device": "cpu", "rotated_copies": 1, "us": 10.0} for row in today.gemm_rows([1])]
    rows += [
        {**row, "name": row["name"] + HALF_TP, "device": "cpu", "rotated_copies": 1, "us": 13.0, "threads": 2}
        for row in half.gemm_rows([1])
    ]
    info = {"device": "cpu", "torch": "2.11", "device_name": "cpu", "threads": 1}
    gemm = GemmResult(info=info, copy_ceiling_gbps=20.0, rows=rows, artifact="gemm.json")
    assert predict_gemm(today, gemm, 1.0, experts=False).ms_per_step == pytest.approx(
        10.0 * (4 * today.num_layers + 1) / 1000  # qkv, o, gate_up, down a layer; the lm_head
    )
    calls = 4 * today.num_layers + 1
    assert half_tp_extra_ms(today, gemm, 1.0) == pytest.approx(3.0 * calls / 1000)
    without = GemmResult(info=info, copy_ceiling_gbps=20.0, rows=rows[: len(rows) // 2], artifact="gemm.json")
    assert half_tp_extra_ms(today, without, 1.0) is None  # not timed: the assumption stays, and says so

    rules = load_rules()
    facts = ModelFacts(
        model="/m",
        generated=False,
        model_type="llama",
        config_artifact="config.json",
        vocab_size=128256,
        weight_dtype="bf16",
        group_size=None,
        shapes=today,
    )
    figures = KeyFigures(
        tp=2, rank0=None, breakdown=None, model=facts, host=None, gemm=gemm, allreduce=None, decode_tpot_ms=None
    )
    measured = rule_figures(figures, rules.assumptions)
    assert measured["half_tp_gemm_extra_ms"] == pytest.approx(3.0 * calls / 1000)
    assert provenance("half_tp_gemm_extra_ms", measured, rules.assumptions).startswith("measured: gemm_bench")
    figures_without = KeyFigures(
        tp=2, rank0=None, breakdown=None, model=facts, host=None, gemm=without, allreduce=None, decode_tpot_ms=None
    )
    assumed = rule_figures(figures_without, rules.assumptions)
    assert assumed["half_tp_gemm_extra_ms"] is None  # no trace here: nothing to multiply the factor by
    # with a trace: its GEMM and MoE time x (the assumed factor - 1)
    traced = {"gemm_ms": 0.4, "moe_ms": 0.1}
    assert half_tp_extra_assumed(traced, rules.assumptions) == pytest.approx(0.5 * (2.0 - 1))
    assert provenance("half_tp_gemm_extra_ms", assumed, rules.assumptions) == "assumed: from half_tp_gemm_factor"


def test_verifying_drafted_tokens_on_a_moe_model_costs_the_experts_the_wider_step_touches() -> None:
    """The Qwen3-MoE shape with the H200 micro's experts_fused times (30.9 µs at M=1, 78.2 at M=4)
    and dense rows that do not grow with M: verifying 3 drafted tokens (M=4) adds 48 layers x
    47.3 µs of routed-expert time, which the dense-only figure left out."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks.gpu_model_shapes import shape
    from tasks.decisions.estimates import verify_extra_ms
    from tasks.gemm.results import GemmResult
    from tasks.model.shapes import model_shapes

    shapes = model_shapes(shape("qwen3moe_bf16", {}), 1)
    experts_us = {1: 30.9, 4: 78.2}
    rows = [
        {**row, "device": "cuda", "rotated_copies": 1, "us": experts_us[row["m"]] if row.get("experts") else 10.0}
        for row in shapes.gemm_rows([1, 4])
    ]
    info = {"device": "cuda", "torch": "2.11", "device_name": "H200", "threads": 1}
    gemm = GemmResult(info=info, copy_ceiling_gbps=4000.0, rows=rows, artifact="gemm.json")
    assert shapes.num_layers == 48
    assert verify_extra_ms(shapes, gemm, 1.0, 3) == pytest.approx(48 * (78.2 - 30.9) / 1000)
    dense_only = model_shapes(shape("llama8b_bf16", {}), 1)
    dense_rows = [{**row, "device": "cuda", "rotated_copies": 1, "us": 10.0} for row in dense_only.gemm_rows([1, 4])]
    flat = GemmResult(info=info, copy_ceiling_gbps=4000.0, rows=dense_rows, artifact="gemm.json")
    assert verify_extra_ms(dense_only, flat, 1.0, 3) == pytest.approx(0.0)


def test_a_level_between_the_timed_batches_reads_the_fused_rows_not_one_experts_row_at_its_m() -> None:
    """Qwen3-MoE's micro at M = 1, 4 and 32 also times one routed expert's GEMM at
    ceil(32 x 8 / 128) = 2 tokens. A step of 2 tokens is between the fused rows at 1 and 4 (the
    H200 campaign's c=2 read the per-expert rows at M=2 instead: 4.74 ms of experts a step where the
    fused rows give 2.26, which made its verify cost and MoE time wrong), and so are the W4A16
    ratio and the dense W4A16 delta there: each format's time linear between the batches timed."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks.gpu_model_shapes import shape
    from tasks.decisions.estimates import gemm_ms_at, w4a16_delta_ms
    from tasks.decisions.figures import KeyFigures
    from tasks.decisions.moe_estimates import moe_w4a16_saving_ms
    from tasks.gemm.results import GemmResult
    from tasks.model.shapes import model_shapes

    shapes = model_shapes(shape("qwen3moe_bf16", {}), 1)
    fused = {1: 31.1, 4: 79.1, 32: 262.9}
    as_int4 = {1: 29.0, 4: 49.0, 32: 122.4}
    rows = []
    for row in shapes.gemm_rows([1, 4, 32]):
        us = fused[row["m"]] if row.get("experts") else 500.0 if row["name"].startswith("expert_") else 10.0
        rows.append({**row, "device": "cuda", "rotated_copies": 1, "us": us})
        if row.get("experts"):
            rows.append({**rows[-1], "name": row["name"] + " (as W4A16)", "dtype": "w4a16", "us": as_int4[row["m"]]})
        elif row["name"] != "lm_head" and not row["name"].startswith("expert_"):
            rows.append({**rows[-1], "name": row["name"] + " (as W4A16)", "dtype": "w4a16", "us": 4.0 * row["m"]})
    assert any(row["m"] == 2 and row["name"].startswith("expert_") for row in rows)
    info = {"device": "cuda", "torch": "2.11", "device_name": "H200", "threads": 1}
    gemm = GemmResult(info=info, copy_ceiling_gbps=4000.0, rows=rows, artifact="gemm.json")
    between = 31.1 + (79.1 - 31.1) / 3
    assert gemm_ms_at(shapes, gemm, 2.0, experts=True) == pytest.approx(48 * between / 1000)
    figures = KeyFigures(
        tp=1, rank0=None, breakdown=None, model=None, host=None, gemm=gemm, allreduce=None, decode_tpot_ms=None
    )
    assert moe_w4a16_saving_ms(figures, 48, 2.0) == pytest.approx(48 * (between - (29.0 + 20.0 / 3)) / 1000)
    quantized = shapes.model_copy(update={"layers": [layer for layer in shapes.layers if layer.name != "lm_head"]})
    # qkv and o a layer, bf16 10 µs against W4A16 4 x M µs: at M=2, 2 GEMMs x 48 x (10 - 8) µs
    assert w4a16_delta_ms(quantized, gemm, 2.0) == pytest.approx(2 * 48 * (10.0 - 8.0) / 1000)
