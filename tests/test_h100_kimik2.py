"""The third shape: the Kimi-K2 4-layer int4 shape (DeepSeek-V3 architecture: MLA, 384 int4 experts
on Marlin-MoE, dummy weights, TP 1, vLLM 0.26) on a lent H100 80GB, twice, each from a clean work
folder, no ledger, the GPU n-gram drafter then FP8 KV at c = 1, 2 and 4
(`SHAPE=kimik2_4layer_int4 MODE=all CONC_MAX=4 GPU_MEM=0.85 benchmarks/gpu_experiments.sh`, 2026-12-06;
tests/data/h100_kimik2_run{1,2}_todo.json.gz as the H100 left them). Real GPU measurements re-read on
CPU by benchmarks/predictions_again.py, out of sample: no rule was chosen looking at them. Both
options miss here, and the findings name the input each miss is in."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
sys.path.insert(0, str(ROOT))

from benchmarks.predictions_again import predictions_again  # noqa: E402

CONFIG = DATA / "h100_kimik2_all_experiments.toml"
RUNS = [DATA / "h100_kimik2_run1_todo.json.gz", DATA / "h100_kimik2_run2_todo.json.gz"]


def _by_key(path: Path, ledger: Path | None = None) -> dict:
    record, rows = predictions_again(path, CONFIG, ledger)
    assert record.concurrency == 1
    return {(row.experiment, row.concurrency): row for row in rows}


def _ratio(row) -> float:
    return row.predicted_ms / row.realised.delta_ms


def _todos(path: Path) -> dict:
    return {todo["id"]: todo for todo in json.loads(gzip.decompress(path.read_bytes()))["todos"]}


@pytest.fixture(scope="module", params=RUNS, ids=["run1", "run2"])
def rows(request):
    return _by_key(request.param)


def test_the_drafter_from_a_clean_folder_is_high_by_its_assumed_step_cost(rows) -> None:
    """Run 1: 1.89 / 2.23 / 2.55; run 2: 2.79 / 1.57 / 1.44. The drafter's acceptance was right (3.417
    tokens a step replayed against 3.413 and 3.421 served); the miss is spec_gpu_step_extra_ms, assumed 0
    from a clean folder (an upper bound, said so in the row), measured after by the experiment at 2.063
    and 3.028 ms: two launches on one machine, an hour apart."""
    for level in (1, 2, 4):
        row = rows[("speculative_decoding_gpu", level)]
        assert row.inputs.startswith("spec_gpu_step_extra_ms assumed")
        assert 1.4 <= _ratio(row) <= 2.9
        assert not row.wrong_sign


def test_an_earlier_record_brings_the_drafter_in_at_two_levels_of_three(tmp_path: Path) -> None:
    """Run 2 with run 1's ledger (benchmarks/results/h100_kimik2_run1_ledger.json): the step cost from
    the earlier record on the same hardware, shape and vLLM gives 1.69 / 1.07 / 0.99: run 2's own step
    cost was 1.5x run 1's, the spread between two launches that no pre-experiment input holds."""
    rows = _by_key(RUNS[1], ROOT / "benchmarks" / "results" / "h100_kimik2_run1_ledger.json")
    ratios = {level: _ratio(rows[("speculative_decoding_gpu", level)]) for level in (1, 2, 4)}
    assert 1.5 <= ratios[1] <= 1.9 and 0.9 <= ratios[2] <= 1.15 and 0.9 <= ratios[4] <= 1.1
    assert "earlier record" in rows[("speculative_decoding_gpu", 1)].inputs


def test_fp8_kv_on_mla_was_an_assumption_and_its_realised_change_is_not_the_devices() -> None:
    """FP8 KV: -0.008 ms predicted from the stated assumptions (the runs had no MLA micro), realised
    +0.132 / -0.157 / +0.145 (run 1) and +0.177 / +0.400 / +0.859 (run 2). The traces say the device's
    work moved -0.019 (run 1) and -0.013 ms (run 2) a step: the realised change is host time between the
    server's kernels (each findings' calibration line says so), not what FP8 did to the device."""
    for path in RUNS:
        rows = _by_key(path)
        for level in (1, 2, 4):
            assert rows[("fp8_kv_cache", level)].inputs.startswith("kv_fp8_layer_delta_us assumed")
        todos = _todos(path)
        base = todos["analysis_breakdown"]["result"]["ranks"][0]["device_ms_per_step"]
        fp8 = todos["exp_fp8_kv_cache_analysis_breakdown"]["result"]["ranks"][0]["device_ms_per_step"]
        assert -0.025 <= fp8 - base <= -0.005
        assert rows[("fp8_kv_cache", 4)].realised.delta_ms > 0.1  # faster by more than the device's whole change


def test_fp8_kv_on_mla_swaps_the_decode_attention_backend() -> None:
    """FLASH_ATTN_MLA lists no FP8 KV dtype in vLLM 0.26, so the FP8 variant's server ran TRITON_MLA:
    the base trace's decode attention is FlashAttention-3 and its combine, the variant's Triton's split-KV
    stage 1 (what tasks/gemm/remote/kv_mla_bench.py times on each side)."""
    from tasks.gemm.kv_layer_kernels import named

    todos = _todos(RUNS[0])
    names = {
        tid: [
            k["name"] for k in todos[tid]["result"]["ranks"][0]["top_kernels"] if named("decode attention", k["name"])
        ]
        for tid in ("analysis_breakdown", "exp_fp8_kv_cache_analysis_breakdown")
    }
    assert any("FlashAttnFwdSm90" in name for name in names["analysis_breakdown"])
    assert names["exp_fp8_kv_cache_analysis_breakdown"] == ["_fwd_grouped_kernel_stage1"]


# The two backends' kernels of one layer as run 1's traces ran them, µs a call
# (`python benchmarks/trace_attention_kernels.py benchmarks/results/h100_kimik2_run1_*.rank0.trace.json.gz`:
# the p50 of FlashAttention's kernels and of stage 1, as the traces' top kernels hold them; the mean of the
# rest; the zeroed output and LSE are two fills a layer).
BF16_LAYER = {
    "void vllm::concat_and_cache_mla_kernel<__nv_bfloat16, __nv_bfloat16, 0>": 1.78,
    "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<...>>>": 12.576,
    "void cutlass::device_kernel<flash::FlashAttnFwdCombine<...>>": 4.528,
}
FP8_LAYER = {
    "void vllm::concat_and_cache_mla_kernel<__nv_bfloat16, unsigned char, 1>": 2.06,
    "void at::native::CatArrayBatchedCopy<...>": 2.03,
    "void at::native::vectorized_elementwise_kernel<8, at::native::FillFunctor<c10::BFloat16>>": 1.81,
    "_fwd_grouped_kernel_stage1": 6.848,
    "_fwd_kernel_stage2": 2.16,
}


def _kv_row(m: int, dtype: str, kernels: dict[str, float]) -> dict:
    write = sum(us for name, us in kernels.items() if "concat_and_cache_mla" in name)
    total = sum(kernels.values())
    backend = "TRITON_MLA decode_attention_fwd" if dtype == "fp8" else "FLASH_ATTN_MLA flash_attn_varlen_func"
    return {
        "kernel": f"vLLM concat_and_cache_mla + {backend}",
        "m": m,
        "context": 80,
        "kv_dtype": dtype,
        "write_us": write,
        "attention_us": total - write,
        "us": total,
        "kernels_us": kernels,
        "cold_write_us": write,
        "cold_attention_us": total - write,
        "cold_kernels_us": kernels,
    }


def test_an_mla_micro_row_feeds_the_fp8_prediction(tmp_path: Path) -> None:
    """What the MLA micro writes (kv_mla_bench.py: not yet run on a GPU; the device time had gone to the
    two campaigns), here as rows holding exactly what run 1's server ran on each backend: the prediction
    reads them, its input measured, and comes out at the traces' device change: 4 layers x (18.88 -
    14.91) µs = +0.016 ms faster against the traced 0.019 (the FlashAttention scheduler's 1.9 µs kernel a
    step, which no layer holds, is the rest): the realised change's sign (+0.13 and +0.18 at c=1), a tenth
    of its size. Where the rows are absent the input stays assumed (above)."""
    document = json.loads(gzip.decompress(RUNS[0].read_bytes()))
    gemm = next(todo for todo in document["todos"] if todo["id"] == "gemm_bench")["result"]
    gemm.pop("kv_not_measured")
    gemm["kv_rows"] = [_kv_row(m, d, k) for m in (1, 4) for d, k in (("auto", BF16_LAYER), ("fp8", FP8_LAYER))]
    edited = tmp_path / "run1_mla_micro.json.gz"
    edited.write_bytes(gzip.compress(json.dumps(document).encode()))
    rows = _by_key(edited)
    row = rows[("fp8_kv_cache", 1)]
    expected = 4 * (sum(BF16_LAYER.values()) - sum(FP8_LAYER.values())) / 1000  # positive: faster
    assert row.predicted_ms == pytest.approx(expected, abs=1e-4)
    assert row.predicted_ms > 0 and row.inputs == ""
    assert not row.wrong_sign
    from tasks.gemm.results import GemmResult
    from tasks.gemm.section import kv_section

    text = kv_section(GemmResult.model_validate(gemm))
    assert "MLA attention layer" in text and "TRITON_MLA" in text and "| -3.98 |" in text  # FP8 - bf16 µs a layer
