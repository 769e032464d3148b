"""The GEMM phase's script on this machine's CPU with real torch kernels: every format is
checked against the bf16 reference and timed. (The CUDA paths are proven on an H200 by
benchmarks/gpu_gemm_proof.py; CI has no GPU.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.heavy
def test_bf16_w4a16_and_fp8_are_checked_then_timed(tmp_path: Path) -> None:
    shapes = [
        {"name": f"{dtype} layer", "m": 4, "k": 256, "n": 384, "dtype": dtype} for dtype in ("bf16", "w4a16", "fp8")
    ]
    (tmp_path / "shapes.json").write_text(json.dumps(shapes))
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tasks/gemm/remote/gemm_bench.py"),
            str(tmp_path / "shapes.json"),
            "--repeats",
            "3",
            "--group-size",
            "128",
            "--fp8-block",
            "128",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    document = json.loads(out)
    rows = {row["dtype"]: row for row in document["rows"]}
    assert document["copy_ceiling_gbps"] > 0
    for dtype, row in rows.items():
        assert "skipped" not in row, row
        assert row["us"] > 0 and row["pct_of_copy_ceiling"] > 0, dtype
        assert row["relative_error_vs_bf16_reference"] < 0.02, dtype
        assert row["samples"] == 3 and row["spread_pct"] >= 0, dtype  # the median's own noise
    # fp8 on a CPU: no blockwise kernel there, so the finest available scaling is used and named.
    assert rows["fp8"]["kernel"] == "torch._scaled_mm fp8 e4m3, rowwise scales"
    assert rows["w4a16"]["kernel"] == "torch._weight_int4pack_mm_for_cpu"
    # bf16 runs the server's own CPU GEMM where vLLM's CPU build is importable (./dev installs it).
    vllm_here = subprocess.run([sys.executable, "-c", "import vllm._custom_ops"], capture_output=True).returncode == 0
    # Which one vLLM's CPU dispatch picks depends on the CPU: sgl's AMX kernel where the CPU has AMX
    # (amx_bf16 in /proc/cpuinfo), else oneDNN, else (oneDNN's handler fails on some AVX2 CPUs, as
    # vLLM's own dispatch finds) torch's linear, which the server then runs too.
    server = ("vLLM _C::weight_packed_linear (sgl AMX, as the server)", "vLLM _C::onednn_mm (oneDNN, as the server)")
    make_onednn = "import torch, vllm._custom_ops as ops; ops.create_onednn_mm(torch.ones(384, 256, dtype=torch.bfloat16).t(), 32)"
    onednn_fails = (
        vllm_here and subprocess.run([sys.executable, "-c", make_onednn], capture_output=True).returncode != 0
    )
    if onednn_fails:
        assert rows["bf16"]["kernel"].startswith("torch.nn.functional.linear"), rows["bf16"]["kernel"]
        assert "so its server runs this too" in rows["bf16"]["kernel"]
    else:
        expected = server if vllm_here else ("torch.nn.functional.linear",)
        assert rows["bf16"]["kernel"].startswith(expected), rows["bf16"]["kernel"]
    # Bytes moved follow the format: fp8 weights are 1 byte, int4 half a byte (+ scales/zeros).
    assert rows["fp8"]["bytes_moved"] == 4 * 256 + 256 * 384 + 4 * 384 * 2
    assert rows["bf16"]["bytes_moved"] == 4 * 256 * 2 + 256 * 384 * 2 + 4 * 384 * 2


@pytest.mark.heavy
def test_fused_moe_rows_are_checked_and_cpu_rows_carry_the_ops_own_time(tmp_path: Path) -> None:
    """A MoE layer's routed experts (random routing, E experts, top-k): on CPU the torch fallback
    is named, checked against the per-token reference and timed; int4 experts need vLLM's CUDA
    Marlin-MoE and say so. CPU rows carry the op's profiled duration beside the call's."""
    shapes = [
        {"name": "experts_fused", "m": 4, "k": 128, "n": 64, "dtype": dtype, "experts": 16, "top_k": 4}
        for dtype in ("bf16", "w4a16")
    ] + [{"name": "dense", "m": 1, "k": 256, "n": 256, "dtype": "bf16"}]
    (tmp_path / "shapes.json").write_text(json.dumps(shapes))
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tasks/gemm/remote/gemm_bench.py"),
            str(tmp_path / "shapes.json"),
            "--repeats",
            "3",
            "--group-size",
            "32",
            "--threads",
            "1",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    document = json.loads(out)
    fused_bf16, fused_int4, dense = document["rows"]
    assert document["info"]["threads"] == 1
    assert fused_bf16["kernel"].startswith("torch per-expert loop (fallback: ")
    assert fused_bf16["relative_error_vs_bf16_reference"] < 0.02 and fused_bf16["us"] > 0
    assert 4 <= fused_bf16["experts_touched"] <= 16  # 4 tokens x top-4 of 16 experts
    assert "us" not in fused_int4 and "Marlin" not in fused_int4.get("kernel", "")
    assert fused_int4["skipped"].startswith("vLLM's fused-MoE kernels unavailable")
    assert dense["op_us"] is not None and dense["op_us"] > 0


def test_a_time_out_of_line_with_the_neighbouring_batch_sizes_is_suspect() -> None:
    """Figures from a real findings document: qkv at M=8 37.4 µs, then 4,192.7 µs at M=32."""
    sys.path.insert(0, str(ROOT / "tasks/gemm/remote"))
    from bench_timing import shape_outliers

    rest = (4096, 6144, "bf16", None, None)
    assert shape_outliers({(1, *rest): 30.1, (8, *rest): 37.4, (32, *rest): 4192.7}) == {(32, *rest)}
    assert shape_outliers({(1, *rest): 300.0, (8, *rest): 37.4, (32, *rest): 80.0}) == {(1, *rest)}
    # Plausible growth (weight-bound at small M, compute-bound later) is left alone.
    assert shape_outliers({(1, *rest): 30.1, (8, *rest): 37.4, (32, *rest): 95.0, (128, *rest): 340.0}) == set()
    other = (4096, 4096, "bf16", None, None)  # another GEMM: never compared with the first
    assert shape_outliers({(8, *rest): 37.4, (32, *other): 4192.7}) == set()
