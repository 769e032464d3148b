"""What the server ran, read from the trace: the all-reduce implementation, a quantized config that ran unquantized kernels."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.mark.parametrize(
    "names, expected",
    [
        (
            ["ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"],
            "NCCL AllReduce (ring algorithm, LL protocol)",
        ),
        (
            ["void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*)"],
            "vLLM custom all-reduce, one-stage (one-shot)",
        ),
        (["_C::shm_allreduce", "_C::shm_all_gather"], "vLLM CPU shared-memory all-reduce (_C::shm_allreduce)"),
        (["_C::shm_all_gather"], None),
    ],
)
def test_the_all_reduce_implementation_is_named_from_the_trace(names: list[str], expected: str | None) -> None:
    from tasks.synthesis.server_ran import allreduce_implementation

    assert allreduce_implementation(names) == expected


def test_a_quantized_config_that_ran_unquantized_kernels_is_flagged() -> None:
    from tasks.analysis.results import RankBreakdown
    from tasks.model import model_facts
    from tasks.service.results import LoadSummary
    from tasks.synthesis.server_ran import server_ran_section

    config = json.loads((Path(__file__).parent / "data" / "configs" / "llama_3_1_8b.json").read_text())
    config["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 128}
    facts = model_facts(config, "/m", False, Path("/m/config.json"), 1)
    assert facts.weight_dtype == "w4a16"

    def rank0(kernel: str) -> RankBreakdown:
        figures = {"ms_per_step": 4.0, "calls_per_step": 224.0, "mean_us_per_call": 17.0, "p50_us_per_call": 15.0}
        return RankBreakdown.model_validate(
            {
                "rank": 0,
                "kind": "gpu",
                "decode_steps": 30,
                "prefill_steps": 1,
                "device_ms_per_step": 4.3,
                "busy_union_ms_per_step": 4.3,
                "wall_ms_per_step": 4.5,
                "categories": {},
                "communication_calls_per_step": {},
                "communication_by_name_per_step": {},
                "top_kernels": [{"name": kernel, "category": "gemm", **figures}],
                "unmatched_names": [],
                "trace": "t",
            }
        )

    load = LoadSummary(phase="ready", quantization="gptq")
    flagged = server_ran_section(load, rank0("nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_TNN"), facts)
    assert "**The model's config.json declares w4a16 weights, but no traced GEMM kernel is a quantized one" in flagged
    fine = server_ran_section(load, rank0("void marlin::Marlin<__nv_bfloat16, 4, 8, 8, 8, 4, 8, true, 0>"), facts)
    assert "declares w4a16" not in fine
