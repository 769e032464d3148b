"""Shape derivation on real public config.json files, against shapes computed by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.errors import InputError
from tasks.model.shapes import derive_shapes

CONFIGS = Path(__file__).parent / "data" / "configs"


def shapes(name: str, tp: int, m: int = 1) -> tuple[dict, dict[str, tuple]]:
    derived = derive_shapes(json.loads((CONFIGS / name).read_text()), tp, [m], source=name)
    return derived, {row["name"]: (row["m"], row["k"], row["n"], row["dtype"]) for row in derived["shapes"]}


def test_kimi_k2_int4_at_tp8() -> None:
    derived, table = shapes("kimi_k2_thinking.json", 8, m=8)
    assert derived["family"] == "deepseek_v3" and derived["weight_dtype"] == "w4a16"
    assert derived["group_size"] == 32
    # By hand: 64 heads / 8 = 8 a rank; q/k head dim 128 + 64 = 192, v 128.
    assert table["fused_qkv_a_proj"] == (8, 7168, 1536 + 512 + 64, "bf16")
    assert table["q_b_proj"] == (8, 1536, 8 * 192, "bf16")
    assert table["kv_b_proj"] == (8, 512, 8 * (128 + 128), "bf16")
    assert table["o_proj"] == (8, 8 * 128, 7168, "bf16")
    assert table["dense_gate_up_proj"] == (8, 7168, 2 * 18432 // 8, "bf16")
    assert table["dense_down_proj"] == (8, 18432 // 8, 7168, "bf16")
    # Shared experts are in the checkpoint's ignore list: bf16. Routed experts are int4;
    # each sees 8 tokens x 8 of 384 experts = 0.17 tokens on average, so M = 1.
    assert table["shared_expert_w13"] == (8, 7168, 2 * 2048 // 8, "bf16")
    assert table["expert_w13"] == (1, 7168, 2 * 2048 // 8, "w4a16")
    assert table["expert_w2"] == (1, 2048 // 8, 7168, "w4a16")
    assert table["lm_head"] == (8, 7168, 163840 // 8, "bf16")
    assert derived["allreduces_per_step"] == 2 * 61 + 1


def test_deepseek_v3_at_tp8() -> None:
    derived, table = shapes("deepseek_v3.json", 8, m=64)
    # quant_method fp8, e4m3, weight_block_size [128, 128]: every linear layer but the router
    # and lm_head is FP8.
    assert (derived["weight_dtype"], derived["group_size"]) == ("fp8", 128)
    assert table["fused_qkv_a_proj"] == (64, 7168, 1536 + 512 + 64, "fp8")
    assert table["q_b_proj"] == (64, 1536, 16 * 192, "fp8")
    assert table["kv_b_proj"] == (64, 512, 16 * 256, "fp8")
    assert table["o_proj"] == (64, 2048, 7168, "fp8")
    assert table["dense_down_proj"] == (64, 18432 // 8, 7168, "fp8")
    assert table["shared_expert_w2"] == (64, 2048 // 8, 7168, "fp8")
    assert table["expert_w13"] == (2, 7168, 512, "fp8")  # 64 x 8 / 256 = 2 tokens an expert
    assert table["moe_gate"] == (64, 7168, 256, "bf16")
    assert table["lm_head"] == (64, 7168, 129280 // 8, "bf16")
    counts = {row["name"]: row["count_per_layer"] for row in derived["shapes"]}
    assert counts["dense_gate_up_proj"] == pytest.approx(3 / 61)
    assert counts["expert_w13"] == pytest.approx(8 * 58 / 61)


def test_llama_3_1_8b_at_tp2() -> None:
    derived, table = shapes("llama_3_1_8b.json", 2)
    assert derived["family"] == "llama"
    assert table["qkv_proj"] == (1, 4096, (16 + 2 * 4) * 128, "bf16")
    assert table["o_proj"] == (1, 2048, 4096, "bf16")
    assert table["gate_up_proj"] == (1, 4096, 14336, "bf16")
    assert table["down_proj"] == (1, 7168, 4096, "bf16")
    assert table["lm_head"] == (1, 4096, 64128, "bf16")


def test_compressed_tensors_fp8_per_channel() -> None:
    config = json.loads((CONFIGS / "llama_3_1_8b.json").read_text())
    config["quantization_config"] = {
        "quant_method": "compressed-tensors",
        "config_groups": {
            "group_0": {
                "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
                "input_activations": {"num_bits": 8, "type": "float", "dynamic": True},
            }
        },
    }
    derived = derive_shapes(config, 2, [1])
    assert (derived["weight_dtype"], derived["group_size"]) == ("fp8", 0)
    dtypes = {row["name"]: row["dtype"] for row in derived["shapes"]}
    assert dtypes["qkv_proj"] == dtypes["down_proj"] == "fp8" and dtypes["lm_head"] == "bf16"


def test_kv_heads_fewer_than_ranks_are_replicated() -> None:
    _, table = shapes("llama_3_1_8b.json", 16)
    assert table["qkv_proj"] == (1, 4096, (2 + 2 * 1) * 128, "bf16")


def test_mixtral_at_tp2() -> None:
    derived, table = shapes("mixtral_8x7b.json", 2, m=16)
    assert derived["family"] == "mixtral"
    assert table["qkv_proj"] == (16, 4096, 3072, "bf16")
    assert table["expert_w13"] == (4, 4096, 14336, "bf16")  # 16 x 2 / 8 = 4 tokens an expert
    assert table["expert_w2"] == (4, 7168, 4096, "bf16")


def test_missing_field_is_named() -> None:
    config = json.loads((CONFIGS / "kimi_k2_thinking.json").read_text())
    del config["q_lora_rank"]
    with pytest.raises(InputError, match="x.json: field 'q_lora_rank' is missing"):
        derive_shapes(config, 8, [1], "x.json")
    config = json.loads((CONFIGS / "llama_3_1_8b.json").read_text())
    del config["intermediate_size"]
    with pytest.raises(InputError, match="x.json: field 'intermediate_size' is missing"):
        derive_shapes(config, 2, [1], "x.json")


def test_indivisible_tp_is_explained() -> None:
    with pytest.raises(InputError, match="num_attention_heads = 32 does not divide by tensor_parallel 3"):
        derive_shapes(json.loads((CONFIGS / "llama_3_1_8b.json").read_text()), 3, [1], "x.json")


def test_unsupported_family() -> None:
    with pytest.raises(InputError, match="model_type 'bert' is not a supported family"):
        derive_shapes({"model_type": "bert", "hidden_size": 768}, 1, [1], "x.json")
