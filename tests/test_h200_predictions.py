"""Today's decision rules on two H200 campaigns' stored measurements: the Qwen3-30B-A3B shape (bf16,
dummy weights, TP 1, vLLM 0.26), run twice by benchmarks/gpu_experiments.sh with FP8 KV, W4A16
and n-gram speculative decoding as experiments at c = 1, 2 and 4 (the todo files as the H200 left
them, tests/data/h200_qwen3moe_run{1,2}_todo.json.gz). Real GPU measurements, re-read on CPU by
benchmarks/predictions_again.py: the record is computed again from what the campaign measured
before any experiment, and held against what the experiments realised. The W4A16 rule was changed
after seeing run 2 (in-sample); run 1 was not looked at for it."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from stored_runs import DATA, ROOT, report, stored_state

from benchmarks.predictions_again import predictions_again

CONFIG = DATA / "h200_qwen3moe_experiments.toml"


def _calibration_lines(tmp_path: Path, todo: str, config: str) -> dict[str, str]:
    """The findings regenerated from a stored todo file (`orchestrate report`): each experiment's
    calibration line, by experiment."""
    text = report(stored_state(todo, tmp_path), config, tmp_path / "reports")
    lines = {line.split("**")[1]: line for line in text.splitlines() if line.startswith("- **") and "` `" not in line}
    return {name: line for name, line in lines.items() if "calibrated" in line and "prediction" in line}


@pytest.fixture(scope="module", params=[1, 2])
def rows(request):
    record, rows = predictions_again(DATA / f"h200_qwen3moe_run{request.param}_todo.json.gz", CONFIG)
    assert record.concurrency == 1
    return rows


def test_w4a16_on_the_moe_has_the_right_sign_at_every_level(rows) -> None:
    """Marlin-MoE saves little at one token a step (30.9 against 28.8 µs a layer) and the dense
    W4A16 GEMMs are slower at hidden 2048, so W4A16 is slower at c=1; at c=4 the experts' saving
    (78.2 against 46.9 µs) wins. The traced MoE time x the micro's ratio predicted c=2 at -0.007 ms
    against +0.101 realised (a wrong sign) and c=4 at 0.73 of the realised; the micro's difference
    gets both."""
    int4 = [row for row in rows if row.experiment == "int4_weights"]
    assert [row.concurrency for row in int4] == [1, 2, 4]
    assert all(row.predicted_ms is not None for row in int4)
    assert not any(row.wrong_sign for row in int4)
    c1, _, c4 = int4
    assert c1.predicted_ms < 0 < c4.predicted_ms  # type: ignore[operator]
    assert 0.8 <= c4.predicted_ms / c4.realised.delta_ms <= 1.25  # type: ignore[operator]


def test_the_cpu_drafters_step_cost_assumed_zero_makes_speculative_decoding_an_upper_bound(rows) -> None:
    """vLLM 0.26 turns async scheduling off for the n-gram drafter on the CPU: the host work the base
    step hid is paid every step, which no micro holds (spec_step_extra_ms, assumed 0). The prediction
    is then high at every level, as the rules file says it is, and names the assumption."""
    spec = [row for row in rows if row.experiment == "speculative_decoding"]
    assert [row.concurrency for row in spec] == [1, 2, 4]
    assert all(row.predicted_ms > row.realised.delta_ms > 0 for row in spec)  # type: ignore[operator]
    assert all(row.inputs == "spec_step_extra_ms assumed" for row in spec)


def test_the_findings_say_what_the_variant_drafted_for_the_drafting_experiment_only(tmp_path: Path) -> None:
    """The findings regenerated from run 2's todo file: the calibration line of the speculative
    experiment names the tokens a step its stream and vLLM's counters gave; W4A16's and FP8's do
    not (their variants drafted nothing)."""
    calibrations = _calibration_lines(tmp_path, "h200_qwen3moe_run2_todo.json.gz", CONFIG.name)
    assert set(calibrations) == {"fp8_kv_cache", "int4_weights", "speculative_decoding"}
    assert "The variant's stream: 3.36 tokens a decode step" in calibrations["speculative_decoding"]
    assert not any("The variant's stream" in calibrations[name] for name in ("fp8_kv_cache", "int4_weights"))


H100_RUNS = ["h100_qwen3moe_todo.json.gz", "h100_qwen3moe_run2_todo.json.gz"]


@pytest.mark.parametrize("todo", H100_RUNS)
def test_two_h100_campaigns_out_of_sample_w4a16_at_the_levels_above_one(todo: str) -> None:
    """The same campaign twice on an H100 80GB (run 1: auto; run 2: the GPU drafter, W4A16 and
    FP8 KV listed, in that order): hardware no rule was tuned on. W4A16 at c=2 and c=4 lands within
    0.8-1.25 of what the experiments realised in both. W4A16 at c=1 is a small change either way
    (run 1: +0.085 predicted, -0.078 realised in [-0.160, -0.005], counted as a wrong sign; run 2:
    +0.101 against +0.031): the traced device work fell 0.155-0.160 ms while the step's time beyond
    it grew, which no input holds."""
    record, rows = predictions_again(DATA / todo, DATA / "h100_qwen3moe_experiments.toml")
    assert record.concurrency == 1
    by = {(row.experiment, row.concurrency): row for row in rows}
    for key in [("int4_weights", 2), ("int4_weights", 4)]:
        row = by[key]
        assert 0.8 <= row.predicted_ms / row.realised.delta_ms <= 1.25, key  # type: ignore[operator]
    assert by[("int4_weights", 1)].wrong_sign == (todo == H100_RUNS[0])


@pytest.mark.parametrize("todo", [*H100_RUNS, "h200_qwen3moe_run2_todo.json.gz"])
def test_the_fp8_kv_prediction_leaves_out_the_query_quantisation_the_server_does_not_run(todo: str) -> None:
    """The KV micro timed the query's FP8 quantisation as a kernel of its own (4.5-9.3 µs, bimodal
    between runs) and counted it; the FP8 variants' traces run exactly their base's kernels, category
    by category (torch.compile fuses the quantisation into the kernel before attention). So the
    prediction reads the write and the attention only, and comes out below the realised change on
    every run and level: the micro's FP8 write and attention change a layer 0.4-1.4 µs where the
    traces change 3.4-3.6 (the server's FP8 write 4.2-4.3 µs against the micro's 2.55-2.67). That
    is the input the findings name; before, the uncounted kernel had filled the gap by chance
    (run 1: 1.37 / 1.06 / 1.01, run 2: 2.89 / 5.29 / 3.70)."""
    todos = {t["id"]: t for t in json.loads(gzip.decompress((DATA / todo).read_bytes()))["todos"]}
    base, fp8 = (
        todos[name]["result"]["ranks"][0]["categories"]
        for name in ("analysis_breakdown", "exp_fp8_kv_cache_analysis_breakdown")
    )
    assert {c: v["calls_per_step"] for c, v in base.items()} == pytest.approx(
        {c: v["calls_per_step"] for c, v in fp8.items()}, abs=0.05
    )
    traced_us = (fp8["attention"]["ms_per_step"] - base["attention"]["ms_per_step"]) * 1000 / 48
    assert 3.3 < traced_us < 3.7
    quant = [r["query_quant_us"] for r in todos["gemm_bench"]["result"]["kv_rows"] if r["kv_dtype"] == "fp8"]
    assert min(quant) > 4.0  # what the micro's kernel of its own took, no longer counted
    config = "h200_qwen3moe_experiments.toml" if todo.startswith("h200") else "h100_qwen3moe_experiments.toml"
    _, rows = predictions_again(DATA / todo, DATA / config)
    fp8_rows = [row for row in rows if row.experiment == "fp8_kv_cache"]
    assert len(fp8_rows) == 3
    for row in fp8_rows:
        assert row.realised.delta_ms < row.predicted_ms < 0  # slower, by less than realised
        assert row.predicted_ms / row.realised.delta_ms < 0.8  # type: ignore[operator]


def test_the_gpu_drafter_on_the_h100_predicted_with_its_step_cost_assumed_zero() -> None:
    """H100 run 2 served the GPU n-gram drafter: 3.36 tokens a step against the 3.349 the replay of
    the campaign's own outputs predicted. Its step cost beyond the verify GEMMs is assumed 0 (an
    upper bound, said so), so the gain is predicted high: 1.49 / 1.13 / 1.03 of the realised at
    c=1/2/4; the experiment measured that cost, 2.853 ms a step at c=1, which a later campaign on this
    hardware, shape and vLLM takes from the ledger."""
    _, rows = predictions_again(DATA / "h100_qwen3moe_run2_todo.json.gz", DATA / "h100_qwen3moe_experiments.toml")
    spec = {row.concurrency: row for row in rows if row.experiment == "speculative_decoding_gpu"}
    assert sorted(spec) == [1, 2, 4]
    for row in spec.values():
        assert row.inputs == "spec_gpu_step_extra_ms assumed"
        assert row.predicted_ms > row.realised.delta_ms > 0  # an upper bound, and a real gain
    assert 1.4 < spec[1].predicted_ms / spec[1].realised.delta_ms < 1.6  # type: ignore[operator]
    assert 0.8 < spec[4].predicted_ms / spec[4].realised.delta_ms <= 1.25  # type: ignore[operator]


LLAMA_CONFIG = DATA / "h100_llama8b_experiments.toml"
LLAMA_RUN1_LEDGER = ROOT / "benchmarks" / "results" / "h100_llama8b_run1_ledger.json"


@pytest.fixture(scope="module")
def llama_runs():
    """The Llama-3.1-8B shape (bf16, dense, TP 1) twice on an H100 80GB, each from a clean work folder
    (MODE=all: the GPU drafter, W4A16 as Machete, FP8 KV); run 2 started with run 1's ledger, as a
    second campaign on the same hardware, shape and vLLM does. Out of sample: no rule was changed
    after these runs, except that a dense model's W4A16 input now says it has no experts (below)."""
    first = predictions_again(DATA / "h100_llama8b_run1_todo.json.gz", LLAMA_CONFIG)[1]
    second = predictions_again(DATA / "h100_llama8b_run2_todo.json.gz", LLAMA_CONFIG, LLAMA_RUN1_LEDGER)[1]
    return [{(row.experiment, row.concurrency): row for row in rows} for rows in (first, second)]


def test_w4a16_on_a_dense_model_within_a_quarter_at_every_level_of_two_runs(llama_runs) -> None:
    """Machete's GEMMs from the micro against the dense bf16 ones: 1.03-1.07 of the realised change
    at c=1/2/4 in both runs. The MoE term is 0 because model_facts found no MoE layers: a
    measurement, named so, where it had read "assumed: from moe_w4a16_time_ratio"."""
    for by in llama_runs:
        for level in (1, 2, 4):
            row = by[("int4_weights", level)]
            assert 0.8 <= row.predicted_ms / row.realised.delta_ms <= 1.25, level  # type: ignore[operator]
            assert row.inputs == ""  # no input taken from an assumption or an earlier record
    _, rows = predictions_again(DATA / "h100_qwen3moe_run2_todo.json.gz", DATA / "h100_qwen3moe_experiments.toml")
    moe = next(row for row in rows if row.experiment == "int4_weights")
    assert moe.inputs == ""  # the MoE's own term is the micro's (Marlin-MoE), not the dense zero


def test_the_gpu_drafters_step_cost_from_the_first_campaign_puts_the_second_within_a_quarter(llama_runs) -> None:
    """Run 1 assumes the GPU drafter's step cost 0 (an upper bound: 1.21 / 1.30 / 1.32 of the
    realised); its experiment measured 2.503 ms a step, and run 2 takes that from the ledger (named
    as an earlier record): 0.95 / 0.95 / 0.97. The replay of each campaign's own outputs predicted
    3.36 tokens a step; the variants served 3.375."""
    first, second = llama_runs
    for level in (1, 2, 4):
        upper, row = first[("speculative_decoding_gpu", level)], second[("speculative_decoding_gpu", level)]
        assert upper.inputs == "spec_gpu_step_extra_ms assumed"
        assert upper.predicted_ms > upper.realised.delta_ms > 0  # type: ignore[operator]
        assert row.inputs.startswith("spec_gpu_step_extra_ms earlier record: h100-llama8b-experiments-all/")
        assert 0.8 <= row.predicted_ms / row.realised.delta_ms <= 1.25, level  # type: ignore[operator]


def test_the_host_part_of_a_change_is_read_from_untraced_tpot_not_the_profiled_wall(tmp_path: Path) -> None:
    """Where a device-time formula misses, the findings say how much of the change is host time:
    untraced TPOT less the traced device work, base against variant. The profiled step's wall does
    not measure it (the profiler's cost differs between servers): the H200's FP8 KV variant's traced
    wall grew 1.26 ms beyond its device work while its untraced TPOT moved with the device work, and
    the findings had called that host time. A formula whose measured inputs read TPOT (speculative
    decoding's step cost) has the host time in its calibrated figure: no note."""
    h100 = _calibration_lines(tmp_path / "h100", "h100_qwen3moe_todo.json.gz", "h100_qwen3moe_experiments.toml")
    todos = {
        t["id"]: t for t in json.loads(gzip.decompress((DATA / "h100_qwen3moe_todo.json.gz").read_bytes()))["todos"]
    }
    tpot = todos["decision_record"]["result"]["tpot_ms"]
    device = todos["analysis_breakdown"]["result"]["ranks"][0]["device_ms_per_step"]
    x_device = todos["exp_int4_weights_analysis_breakdown"]["result"]["ranks"][0]["device_ms_per_step"]
    note = f"**TPOT beyond the device work went {tpot - device:.3f} → "
    assert note in h100["int4_weights"]
    went = float(h100["int4_weights"].split(note)[1].split(" ms")[0])
    assert went - (tpot - device) > 0.2  # the W4A16 variant's host time grew: the c=1 miss
    assert x_device < device  # while its device work fell
    h200 = _calibration_lines(tmp_path / "h200", "h200_qwen3moe_run2_todo.json.gz", "h200_qwen3moe_experiments.toml")
    assert "beyond" not in h200["fp8_kv_cache"]
    assert "wall 4.393 → 5.858 ms" in h200["fp8_kv_cache"]  # the profiled wall is still shown, as data
    assert "beyond" not in h200["speculative_decoding"]


def test_the_device_idle_between_kernels_of_base_and_variant_is_in_the_calibration_line(tmp_path: Path) -> None:
    """The traces' idle time between a step's kernels (tasks/analysis/intervals.py idle_before),
    base against variant, beside the device work: where a W4A16 variant's host time grows, the
    line says whether it grew inside the traced step. The H100 todo file predates the figure, so
    two values are written into its breakdowns (injected: the point is that the line reads them)."""
    document = json.loads(gzip.decompress((DATA / "h100_qwen3moe_todo.json.gz").read_bytes()))
    for todo in document["todos"]:
        idle = {"analysis_breakdown": 0.3, "exp_int4_weights_analysis_breakdown": 0.52}.get(todo["id"])
        if idle is not None:
            todo["result"]["ranks"][0]["idle_before"] = {"idle_ms_per_step": idle, "categories": {}, "top_kernels": []}
    (tmp_path / "idle_todo.json.gz").write_bytes(gzip.compress(json.dumps(document).encode()))
    lines = _calibration_lines(tmp_path / "out", str(tmp_path / "idle_todo.json.gz"), "h100_qwen3moe_experiments.toml")
    assert "device idle between a step's kernels 0.300 → 0.520 ms (+0.220)" in lines["int4_weights"]
    assert "device idle" not in lines["fp8_kv_cache"]  # its breakdown has no idle figure


def test_the_fp8_experiment_names_the_kernel_its_input_missed_in(tmp_path: Path) -> None:
    """The findings regenerated from the H100's Llama-8B run 1: the FP8 KV calibration line sets the
    KV micro's profiled kernels beside the traces' p50, kernel by kernel, the figures
    benchmarks/kv_micro_vs_trace.py counts from the packed traces themselves
    (benchmarks/results/h100_llama8b_kv_micro_vs_trace.txt): the FP8 write, where the micro's change
    is 0.61 µs and the traces' 2.21, is the input responsible. Campaigns whose micro predates the
    kernel profile (the H200 runs) have no such line."""
    lines = _calibration_lines(tmp_path / "llama", "h100_llama8b_run1_todo.json.gz", LLAMA_CONFIG.name)
    fp8 = lines["fp8_kv_cache"]
    assert "the cache write 2.14 → 4.35 (+2.21), micro 1.87 → 2.48 (+0.61)" in fp8
    assert "decode attention 9.63 → 10.40 (+0.77), micro 7.14 → 7.00 (-0.14)" in fp8
    assert "a layer +3.30 traced against +0.64 in the micro" in fp8
    assert "kernel by kernel" not in lines["int4_weights"]
    older = _calibration_lines(tmp_path / "h200", "h200_qwen3moe_run2_todo.json.gz", CONFIG.name)
    assert "kernel by kernel" not in older["fp8_kv_cache"]
