"""Where a level other than the capture's misses, the findings name the input responsible: no trace
was taken at that level, so each input of the formula is solved for alone (every other as read at
the level) at the value that gives the realised change (tasks/experiments/levels_section.py,
tasks/decisions/formula.py's value_for). Real H100 campaigns (tests/data, re-read on CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from stored_runs import DATA, ROOT, report, stored_state

from benchmarks.predictions_again import predictions_again
from tasks.decisions.formula import evaluate, value_for


def test_value_for_solves_each_input_alone_and_says_when_none_reaches_the_target() -> None:
    """A linear formula, one with a division and one behind a clamp: what it finds, evaluated, gives
    the target; a name the clamp holds at 0, or one the formula does not read, gives None."""
    figures = {"a": 2.0, "b": 3.0, "c": 4.0}
    assert value_for("a * b - c", figures, "a", 11.0) == pytest.approx(5.0)
    x = value_for("c - (c + a) / b", figures, "b", 1.0)
    assert evaluate("c - (c + a) / b", figures | {"b": x}) == pytest.approx(1.0)
    assert x == pytest.approx(2.0)
    assert value_for("max(0, a - c) + b", figures, "a", 1.0) is None  # the clamp keeps the term >= 0
    assert value_for("a + b", figures, "c", 9.0) is None
    assert value_for("a * 0 + b", figures, "a", 9.0) is None


def test_fp8_kv_at_c2_puts_the_miss_on_the_micros_layer_delta_at_two_sequences() -> None:
    """Qwen3-MoE run 6, FP8 KV at c=2: -0.177 predicted against -0.125 realised (1.42). The formula's
    one measured input is the KV micro's change a layer at two sequences, 3.69 µs; 2.60 gives the
    realised change (48 layers); `layers` is a fact of the model and never named."""
    rows = predictions_again(DATA / "h100_qwen3moe_run6_todo.json.gz", DATA / "h100_qwen3moe_auto_experiments.toml")[1]
    by_level = {(row.experiment, row.concurrency): row for row in rows}
    why = by_level[("fp8_kv_cache", 2)].why
    assert why.startswith("- **fp8_kv_cache, c=2** (predicted -0.177 ms, realised -0.125)")
    assert "kv_fp8_layer_delta_us 3.688 → 2.6 (-30%)" in why and why.endswith("Responsible: kv_fp8_layer_delta_us.")
    assert "layers" not in why.replace("kv_fp8_layer_delta_us", "")
    # inside the band or the interval: nothing to explain
    assert by_level[("int4_weights", 2)].why == by_level[("fp8_kv_cache", 4)].why == ""
    assert by_level[("fp8_kv_cache", 1)].why == ""  # the capture's level: the calibration line reads its traces


def test_the_drafter_miss_is_put_on_its_assumed_step_cost_at_about_what_the_experiment_measured() -> None:
    """Kimi-K2 run 4, the GPU drafter at c=2: +1.126 predicted against +0.859 (1.31). Of its inputs the
    step cost is the assumed one (0 from a clean folder); alone it would have to be 0.93 ms, and the
    experiment then measured 1.141 ms: the line names the input that was in fact responsible."""
    rows = predictions_again(DATA / "h100_kimik2_run4_todo.json.gz", DATA / "h100_kimik2_all_experiments.toml")[1]
    why = next(row.why for row in rows if row.experiment == "speculative_decoding_gpu" and row.concurrency == 2)
    assert "spec_gpu_step_extra_ms 0 → 0.9326 (assumed)" in why
    assert "tpot_growth_ms 0.0192 → none does" in why  # behind max(0, ...): cannot explain it alone
    assert why.endswith("Responsible: spec_gpu_step_extra_ms.")
    ledger = json.loads((ROOT / "benchmarks" / "results" / "h100_kimik2_run4_ledger.json").read_text())
    [measured] = [
        r["measured_inputs"]["spec_gpu_step_extra_ms"]
        for r in ledger["records"]
        if r["option"] == "speculative_decoding_gpu"
    ]
    implied = float(why.split("spec_gpu_step_extra_ms 0 → ")[1].split(" ")[0])
    assert 0.8 * measured <= implied <= measured  # 0.93 against the experiment's 1.141


def test_the_findings_carry_the_line_when_the_record_holds_each_levels_inputs(tmp_path: Path) -> None:
    """`orchestrate report` on run 6 with its decision record made by today's code (a record stored
    before the per-level inputs has none, and its findings say nothing more): the experiments section
    lists the FP8 c=2 miss with its input."""
    state = stored_state("h100_qwen3moe_run6_todo.json.gz", tmp_path)
    config = "h100_qwen3moe_auto_experiments.toml"

    def findings() -> str:
        return report(state, config, tmp_path / "reports")

    assert "- **fp8_kv_cache, c=2**" not in findings()
    record = predictions_again(state, DATA / config)[0]  # the record made again by today's code
    document = json.loads(state.read_text())
    todo = next(t for t in document["todos"] if t["id"] == "decision_record")
    assert "inputs" not in todo["result"]["levels"][1]
    todo["result"] = json.loads(record.model_dump_json())
    state.write_text(json.dumps(document))
    text = findings()
    line = next(line for line in text.splitlines() if line.startswith("- **fp8_kv_cache, c=2**"))
    assert "kv_fp8_layer_delta_us 3.688 → 2.6 (-30%)" in line
    assert "Where a level other than the capture's (c=1) misses" in text


def test_value_for_gives_none_where_a_figure_is_not_given_or_no_value_reaches_the_target() -> None:
    """A formula reading a figure the level did not give, or one with no finite solution (1 / (a - 2)
    never reaches 0), is no answer (None), not an error in the findings."""
    assert value_for("a + c", {"a": 1.0}, "a", 7.0) is None
    assert value_for("1 / (a - 2)", {"a": 1.0}, "a", 0.0) is None
