"""What the server ran, from its log and the trace: quantization, GEMM and attention kernels,
the all-reduce implementation, CUDA graphs. A quantized config whose kernels are not quantized
ones is flagged: a config is no proof of what ran, the trace is."""

from __future__ import annotations

import re

from orchestrator.report import md_table
from tasks.analysis.categories import Category
from tasks.analysis.results import RankBreakdown
from tasks.model.results import ModelFacts
from tasks.service.results import LoadSummary
from tasks.view import fmt

QUANTIZED_KERNEL = re.compile(r"marlin|machete|int4|wna16|w4a16|scaled_mm|fp8|gptq|awq|exllama|tinygemm|w8a8", re.I)
NCCL_KERNEL = re.compile(
    r"ncclDevKernel_(\w+?)_(?:Sum_)?\w*?_(RING|TREE|COLLNET\w*|NVLS\w*|PAT)_(LL128|LL|SIMPLE)", re.I
)


def allreduce_implementation(names: list[str]) -> str | None:
    """Which all-reduce the server ran, named from its kernels or ops."""
    found = []
    for name in names:
        if match := NCCL_KERNEL.search(name):
            found.append(f"NCCL {match[1]} ({match[2].lower()} algorithm, {match[3]} protocol)")
        elif "cross_device_reduce_1stage" in name:
            found.append("vLLM custom all-reduce, one-stage (one-shot)")
        elif "cross_device_reduce_2stage" in name:
            found.append("vLLM custom all-reduce, two-stage (two-shot)")
        elif "multimem_all_reduce" in name or "one_shot_all_reduce" in name or "two_shot_all_reduce" in name:
            found.append(f"torch symmetric memory ({name.split('::')[-1].split('<')[0]})")
        elif "shm_allreduce" in name:
            found.append("vLLM CPU shared-memory all-reduce (_C::shm_allreduce)")
        elif "nccl" in name.lower():
            found.append("NCCL")
        elif "gloo" in name.lower() or "c10d::allreduce" in name:
            found.append("torch.distributed (gloo)")
    return ", ".join(dict.fromkeys(found)) or None


def server_ran_section(load: LoadSummary | None, rank0: RankBreakdown | None, model: ModelFacts | None) -> str:
    if load is None and rank0 is None:
        return ""
    rows = []
    if load is not None:
        rows += [
            ["quantization (vLLM's engine config)", load.quantization or "n/a"],
            ["linear kernels (log)", "; ".join(load.linear_kernels) or "not named in the log"],
            ["MoE method (log)", load.moe_method or "-"],
            ["attention backend (log)", load.attention_backend or "not named in the log"],
            ["CUDA graphs (log)", _graphs(load)],
        ]
    gemm_kernels: list[str] = []
    if rank0 is not None:
        gemm_kernels = [k.name for k in rank0.top_kernels if k.category in (Category.GEMM, Category.MOE)]
        attention = [k.name for k in rank0.top_kernels if k.category == Category.ATTENTION]
        rows += [
            [
                "GEMM kernels (trace, decode)",
                "; ".join(
                    f"`{k.name[:70]}` x{fmt(k.calls_per_step, 1)}"
                    for k in rank0.top_kernels
                    if k.category in (Category.GEMM, Category.MOE)
                )
                or "none in the top kernels",
            ],
            ["attention kernels (trace)", "; ".join(f"`{n[:70]}`" for n in attention) or "-"],
            [
                "all-reduce implementation (trace)",
                allreduce_implementation(list(rank0.communication_by_name_per_step)) or "none (no communication)",
            ],
        ]
    text = "## What the server ran\n\nFrom vLLM's start-up log and the decode steps of rank 0's trace.\n\n"
    text += md_table(["what", "seen"], rows)
    declared = model.weight_dtype if model else "bf16"
    if (
        declared != "bf16"
        and rank0 is not None
        and gemm_kernels
        and not any(QUANTIZED_KERNEL.search(name) for name in gemm_kernels)
    ):
        text += (
            f"\n**The model's config.json declares {declared} weights, but no traced GEMM kernel is a"
            " quantized one: the server ran unquantized GEMMs, so the figures above are not those of"
            f" the quantized model** (vLLM reported quantization={load.quantization if load else 'n/a'}).\n"
        )
    return text


def _graphs(load: LoadSummary) -> str:
    if load.enforce_eager:
        return "off (enforce_eager)"
    if load.cudagraph_mode:
        return f"mode {load.cudagraph_mode}" + (
            f", captured in {load.graph_capture_s:.0f} s" if load.graph_capture_s is not None else ""
        )
    if load.graph_capture_s is not None or load.graph_capture_percent is not None:
        return "captured" + (f" in {load.graph_capture_s:.0f} s" if load.graph_capture_s is not None else "")
    return "not seen in the log"
