"""Fast checks of the parts phases are made of, on fixture inputs: vLLM's start-up log, the
capture's file bookkeeping, the decision rules with figures that were not measured."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from orchestrator.errors import InputError
from tasks.decisions.decide import decide
from tasks.decisions.estimates import expected_accepted
from tasks.decisions.formula import evaluate, fmt_figure
from tasks.decisions.rules import load_rules
from tasks.profile.capture import rank_traces, safe_manifest
from tasks.profile.results import CaptureManifest
from tasks.service.vllm_log import LoadProgress

# Lines as vLLM writes them (../shared/FACTS.md: 0.32 CPU, 0.26 CUDA on an H200).
CPU_LOG = """INFO Starting to load model /m...
Loading safetensors checkpoint shards:  45% Completed | 29/64 [02:10<02:41, 0.22it/s]\rLoading safetensors checkpoint shards: 100% Completed | 64/64 [04:40<00:00, 0.22it/s]
INFO Loading weights took 0.05 seconds
INFO CPU KV cache size: 7,280 tokens
INFO init engine (profile, create kv cache, warmup model) took 46.46 s
INFO:     Application startup complete.
"""
GPU_LOG = """INFO Initializing a V1 LLM engine (v0.26.0) with config: model='/m', dtype=torch.bfloat16, quantization=compressed-tensors, enforce_eager=False, kv_cache_dtype=auto
INFO Using MacheteLinearKernel for CompressedTensorsWNA16
INFO Using CompressedTensorsWNA16MarlinMoEMethod
INFO Using 'MARLIN' WNA16 MoE backend out of potential backends: ['MARLIN', 'TRITON']
INFO Using FLASH_ATTN_MLA attention backend out of potential backends: ['FLASH_ATTN_MLA', 'TRITON_MLA']
INFO Model loading took 14.96 GiB and 1.544262 seconds
Capturing CUDA graphs (PIECEWISE): 45%|####5     | 23/51 [00:01<00:01]
INFO Graph capturing finished in 4 secs, took 0.98 GiB
INFO init engine (profile, create kv cache, warmup model) took 40.28 s (compilation: 20.07 s)
"""


@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_vllm_log_is_read_the_same_in_any_chunking(chunk: int) -> None:
    progress = LoadProgress()
    for start in range(0, len(CPU_LOG), chunk):
        progress.feed(CPU_LOG[start : start + chunk])
    assert (progress.shards_done, progress.shards_total, progress.shard_percent) == (64, 64, 100)
    assert progress.weights_load_s == 0.05 and progress.kv_cache_tokens == 7280
    assert progress.engine_init_s == 46.46 and progress.startup_complete and progress.phase == "ready"
    assert progress.phases_seen == ["loading weights", "initialising engine", "starting API server", "ready"]
    assert progress.fatal_line is None


def test_vllm_026_gpu_lines_and_a_fatal_line() -> None:
    progress = LoadProgress()
    progress.feed(GPU_LOG)
    assert (progress.model_memory_gib, progress.model_load_s) == (14.96, 1.544262)
    assert progress.graph_capture_percent == 45 and progress.graph_capture_s == 4.0
    assert progress.engine_init_s == 40.28
    assert (progress.quantization, progress.enforce_eager) == ("compressed-tensors", False)
    assert progress.linear_kernels == ["MacheteLinearKernel for CompressedTensorsWNA16"]
    assert progress.moe_method == "CompressedTensorsWNA16MarlinMoEMethod (MARLIN backend)"
    assert progress.attention_backend == "FLASH_ATTN_MLA"
    progress.feed("(EngineCore_DP0 pid=42) ERROR EngineCore failed to start.\n")
    assert progress.fatal_line and "EngineCore failed to start" in progress.fatal_line


def test_capture_finds_dense_and_moe_rank_traces_not_the_api_servers() -> None:
    files = {
        "rank0.100.pt.trace.json.gz": 5,
        "rank1.101.pt.trace.json.gz": 5,
        "host_77.async_llm.102.pt.trace.json.gz": 9,
    }
    assert rank_traces(files, 2) == {0: "rank0.100.pt.trace.json.gz", 1: "rank1.101.pt.trace.json.gz"}
    moe = {
        "dp0_pp0_tp0_dcp0_ep0_rank0.200.pt.trace.json.gz": 5,
        "dp0_pp0_tp1_dcp0_ep1_rank1.201.pt.trace.json.gz": 5,
        "h_1.async_llm.202.pt.trace.json.gz": 9,
    }
    assert rank_traces(moe, 2) == {
        0: "dp0_pp0_tp0_dcp0_ep0_rank0.200.pt.trace.json.gz",
        1: "dp0_pp0_tp1_dcp0_ep1_rank1.201.pt.trace.json.gz",
    }
    assert rank_traces(moe, 4) == rank_traces(moe, 2)  # ranks 2 and 3 not written yet


def test_an_earlier_capture_is_reused_only_whole_and_with_the_same_settings(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    (traces / "rank0.1.pt.trace.json.gz").write_bytes(b"x" * 10)
    settings = {"requests": 4, "output_tokens": 32, "input_tokens": 64}
    manifest = CaptureManifest(
        ranks={"0": "rank0.1.pt.trace.json.gz"},
        stop_profile_s=1.0,
        files={"rank0.1.pt.trace.json.gz": 10},
        folder=str(traces),
        **settings,
    )
    (tmp_path / "manifest.json").write_text(manifest.model_dump_json())
    assert safe_manifest(tmp_path, settings) == manifest
    assert safe_manifest(tmp_path, {**settings, "output_tokens": 64}) is None  # other settings
    (traces / "rank0.1.pt.trace.json.gz").write_bytes(b"x" * 4)  # a partial fetch
    assert safe_manifest(tmp_path, settings) is None
    (tmp_path / "manifest.json").write_text(json.dumps({"files": {}}))  # another version's
    assert safe_manifest(tmp_path, settings) is None


BASE = {
    "tp": 2,
    "cuda": 1,
    "quantized": 0,
    "tpot_ms": 10.0,
    "tpot_spread_pct": 1.0,
    "decode_tpot_ms": 10.0,
    "comm_ms": 3.0,
    "gemm_ms": 4.0,
    "attention_ms": 1.0,
    "moe_ms": 0.0,
    "comm_share_pct": 30.0,
    "gemm_share_pct": 40.0,
    "attention_share_pct": 10.0,
    "moe_share_pct": 0.0,
    "comm_typical_ms": 1.0,
    "comm_wait_ms": 2.0,
    "comm_wait_min_rank_ms": 0.1,
    "ar_calls": 100.0,
    "ar_trace_p50_us": 20.0,
    "ar_micro_us": 30.0,
    "ar_best_us": 30.0,
    "ar_alternatives": 2.0,
    "a2a_estimate_us": 0.0,
    "moe_layers": 0.0,
    "fits_half_tp": 1.0,
    "w4a16_gemm_delta_ms": 2.0,
    "w4a16_vs_bf16_speedup": 2.0,
    "spec_verify_extra_ms": 0.5,
    "spec_expected_tokens": 2.0,
    "weight_floor_ms": 2.0,
    "spec_accept_rate": 0.6,
    "spec_tokens": 3.0,
    "kv_fp8_bytes_ratio": 0.5,
    "kv_fp8_overhead_us_per_layer": 2.0,
    "half_tp_gemm_factor": 2.0,
    "moe_w4a16_time_ratio": 0.5,
    "kv_read_ms": 1.2,
    "layers": 32.0,
}

# (option, figures changed from BASE, decision, the clause or figure the reason must name, gain ms)
DECISION_CASES = [
    ("allreduce_implementation", {"tp": 1}, "not applicable", "tp > 1 (tp = 1) is false", 0.0),
    (
        "allreduce_implementation",
        {"ar_alternatives": 0.0},
        "not applicable",
        "ar_alternatives >= 1 (ar_alternatives = 0) is false",
        0.0,
    ),
    ("allreduce_implementation", {"ar_best_us": 12.0}, "prioritised", "predicted +1.800 ms (+18.0% of TPOT)", 1.8),
    ("allreduce_implementation", {"ar_best_us": 29.0}, "not pursued", "below min_gain_pct (3% of TPOT)", 0.1),
    (
        "allreduce_implementation",
        {"ar_best_us": 27.0, "tpot_spread_pct": 8.0},
        "not pursued",
        "below TPOT's measured spread (8.0%)",
        0.3,
    ),
    ("allreduce_implementation", {"ar_best_us": None}, "left to investigate", "not measured here: ar_best_us", None),
    ("rank_alignment", {"tp": 1}, "not applicable", "tp > 1 (tp = 1) is false", 0.1),
    ("rank_alignment", {"comm_wait_min_rank_ms": 1.5}, "prioritised", "applies: tp > 1 (tp = 2)", 1.5),
    ("expert_parallelism", {}, "not applicable", "moe_layers > 0 (moe_layers = 0) is false", 0.0),
    ("expert_parallelism", {"tp": 1, "ar_trace_p50_us": None}, "not applicable", "tp > 1 (tp = 1) is false", 0.0),
    ("expert_parallelism", {"moe_layers": 60.0, "a2a_estimate_us": 5.0}, "prioritised", "+0.600 ms", 0.6),
    (
        "expert_parallelism",
        {"moe_layers": 60.0, "a2a_estimate_us": 15.0},
        "not pursued",
        "it would make TPOT worse",
        -0.6,
    ),
    ("lower_tp", {"fits_half_tp": 0.0}, "not applicable", "fits_half_tp == 1 (fits_half_tp = 0) is false", -1.0),
    (
        "lower_tp",
        {"gemm_ms": 1.0, "fits_half_tp": None},
        "left to investigate",
        "fits_half_tp == 1 (fits_half_tp = not measured) is not known here",
        2.0,
    ),
    ("lower_tp", {"gemm_ms": 1.0}, "prioritised", "predicted +2.000 ms", 2.0),
    ("lower_tp", {"tp": 4, "gemm_ms": 1.0}, "not pursued", "it would make TPOT worse", -1.0),
    ("speculative_decoding", {}, "prioritised", "applies: spec_expected_tokens > 1 (spec_expected_tokens = 2)", 4.75),
    (
        "speculative_decoding",
        {"spec_expected_tokens": 1.0},
        "not applicable",
        "spec_expected_tokens > 1 (spec_expected_tokens = 1) is false",
        -0.5,
    ),
    ("int4_weights", {}, "rejected", "compromises precision; not adopted whatever it buys (predicted +2.000 ms", 2.0),
    ("int4_weights", {"quantized": 1}, "rejected", "compromises precision", 2.0),
    ("fp8_kv_cache", {}, "rejected", "(predicted +0.536 ms (+5.4% of TPOT))", 0.536),
    # At short context the KV bytes saved are less than what quantising them costs: slower.
    ("fp8_kv_cache", {"kv_read_ms": 0.05}, "rejected", "(predicted -0.039 ms (-0.4% of TPOT))", -0.039),
    ("lower_tp", {"gemm_ms": 1.0, "half_tp_gemm_factor": 1.5}, "prioritised", "predicted +2.500 ms", 2.5),
]


@pytest.mark.parametrize(("option_id", "changes", "decision", "named", "gain"), DECISION_CASES)
def test_each_decision_names_the_clause_that_decided_it_with_its_figures(
    option_id, changes, decision, named, gain
) -> None:
    rules = load_rules()
    figures = {**BASE, **changes}
    option = next(o for o in decide(figures, rules) if o.id == option_id)
    assert option.decision == decision, option.reason
    assert named in option.reason
    assert option.gain_ms == pytest.approx(gain) if gain is not None else option.gain_ms is None
    # The reason never contradicts the evidence beside it: every "name = value" it cites is the input.
    for name, value in re.findall(r"(\w+) = (not measured|[-\d.]+)", option.reason):
        assert value == fmt_figure(figures[name]), (name, value)
    assert option.inputs == {name: figures[name] for name in option.inputs}


def test_decisions_rank_by_predicted_gain_and_every_option_has_one() -> None:
    figures = {**BASE, "ar_best_us": 12.0, "gemm_ms": 1.0}  # all-reduce 1.8 ms, lower TP 2.0, spec 4.75
    record = decide(figures, load_rules())
    ranked = [(o.id, o.rank) for o in record if o.rank]
    assert ranked == [("speculative_decoding", 1), ("lower_tp", 2), ("allreduce_implementation", 3)]
    assert all(o.gain_ms is not None for o in record)


def test_the_evaluator_does_arithmetic_and_says_what_is_missing() -> None:
    assert evaluate("comm_ms * (tp == 2) - gemm_ms", BASE) == pytest.approx(-1.0)
    assert evaluate("max(comm_ms, gemm_ms) / 2", BASE) == 2.0
    assert evaluate("comm_ms / 0", BASE) is None
    unknown = {**BASE, "comm_share_pct": None}
    assert evaluate("comm_share_pct >= 30 and tp > 1", unknown) is None
    assert evaluate("comm_share_pct >= 30 and tp > 4", unknown) is False  # False whatever the unknown
    assert evaluate("comm_share_pct >= 30 or tp > 1", unknown) is True
    assert expected_accepted(0.6, 3) == pytest.approx((1 - 0.6**4) / 0.4)


def test_a_rule_naming_an_unknown_figure_is_one_line_naming_the_option(tmp_path: Path) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text('[[option]]\nid = "x"\ntitle = "X"\nwhen = "nonsense_pct > 3"\ngain_ms = "1"\nwhy = "w"\n')
    # Refused when the rules load (so at init/check), not when the record is decided after the campaign.
    with pytest.raises(InputError, match="option 'x' key 'when': unknown name 'nonsense_pct'"):
        load_rules(rules)
    rules.write_text('[[option]]\nid = "x"\ntitle = "X"\nwhen = "tp > 1"\nwhy = "w"\n')
    with pytest.raises(InputError, match="option 'x' key 'gain_ms': Field required"):
        load_rules(rules)


def _local_session(tmp_path: Path):
    from orchestrator.hosts.local import LocalHost
    from tasks.config import config_model
    from tasks.registry import UNITS
    from tasks.session import Session

    config = config_model(UNITS).model_validate({"host": {"workdir": str(tmp_path)}})
    return Session(
        config=config, state_path=tmp_path / "state" / "todo.json", reports_dir=tmp_path, host_factory=LocalHost
    )


def _trace(path: Path, rank: int) -> None:
    import gzip

    document = {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
        "traceEvents": [],
    }
    path.write_bytes(gzip.compress(json.dumps(document).encode()))


def test_capture_reads_the_rank_of_a_trace_named_in_a_new_way(tmp_path: Path) -> None:
    from tasks.profile.capture import await_rank_traces

    session = _local_session(tmp_path)
    traces = tmp_path / "traces"
    traces.mkdir()
    _trace(traces / "old.1.pt.trace.json.gz", 0)  # there before the capture: not ours
    _trace(traces / "worker_b.7.pt.trace.json.gz", 1)
    _trace(traces / "worker_a.7.pt.trace.json.gz", 0)
    _trace(traces / "h_1.async_llm.7.pt.trace.json.gz", 0)  # the API server's, never a rank
    found = await_rank_traces(session, {"old.1.pt.trace.json.gz"}, 2, appear_s=5)
    assert found == {0: "worker_a.7.pt.trace.json.gz", 1: "worker_b.7.pt.trace.json.gz"}


@pytest.mark.heavy
def test_capture_fails_soon_listing_what_it_found_when_a_rank_writes_nothing(tmp_path: Path) -> None:
    import time

    from orchestrator.errors import TaskFailed
    from tasks.profile.capture import await_rank_traces

    session = _local_session(tmp_path)
    traces = tmp_path / "traces"
    traces.mkdir()
    _trace(traces / "rank0.5.pt.trace.json.gz", 0)
    started = time.monotonic()
    with pytest.raises(TaskFailed, match=r"only ranks \[0\] of 2 .*rank0\.5\.pt\.trace\.json\.gz"):
        await_rank_traces(session, set(), 2, appear_s=2)
    assert time.monotonic() - started < 10


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


@pytest.mark.parametrize(
    ("csv_text", "busy"),
    [
        ("0, 0, 143771\n", []),  # an idle H200 (measured)
        ("0, 4, 143771\n1, 1, 143771\n", []),
        ("0, 0, 143771\n1, 81510, 143771\n", ["GPU 1: 81510 MiB used"]),  # a server left on GPU 1
        ("0, [N/A], 143771\n", []),  # MIG or an unsupported query: not read as busy
        ("", []),  # no nvidia-smi (CPU host)
    ],
)
def test_gpu_memory_census_reads_nvidia_smi(csv_text: str, busy: list[str]) -> None:
    from tasks.service.census import busy_gpus

    assert busy_gpus(csv_text) == busy


def test_an_input_that_cannot_change_a_gain_is_not_called_an_assumption() -> None:
    from tasks.decisions.formula import matters

    formula = "w4a16_gemm_delta_ms + moe_ms * (1 - moe_w4a16_time_ratio)"
    assert not matters(formula, BASE, "moe_w4a16_time_ratio")  # a dense model: no expert GEMM
    assert matters(formula, BASE | {"moe_ms": 1.5}, "moe_w4a16_time_ratio")
    assert matters(formula, BASE | {"w4a16_gemm_delta_ms": None}, "w4a16_gemm_delta_ms")
