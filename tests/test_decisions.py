"""The decision record: each option judged on a campaign's figures, the clause that decided it, the ranking, the evaluator, and what counts as an assumption."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrator.errors import InputError
from tasks.decisions.decide import decide
from tasks.decisions.estimates import expected_accepted
from tasks.decisions.formula import evaluate, fmt_figure
from tasks.decisions.rules import load_rules

BASE = {
    "tp": 2,
    "cuda": 1,
    "quantized": 0,
    "tpot_ms": 10.0,
    "tpot_spread_pct": 1.0,
    "tpot_growth_ms": 0.0,
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
    "half_tp_gemm_extra_ms": 4.0,  # (gemm_ms + moe_ms) x (2 - 1), as the rules derive it
    "moe_w4a16_time_ratio": 0.5,
    "moe_w4a16_saving_ms": 0.0,  # moe_ms x (1 - 0.5), as the rules derive it
    "kv_read_ms": 1.2,
    "layers": 32.0,
    "spec_step_extra_ms": 0.0,
    "spec_gpu_step_extra_ms": 0.0,
    "half_tp_host_saving_ms": 0.0,
    # 2 µs overhead less 1.2 ms x 0.5 saved over 32 layers, as the rules derive it
    "kv_fp8_layer_delta_us": 2.0 - 1.2 * 0.5 * 1000 / 32,
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
        {"half_tp_gemm_extra_ms": 1.0, "fits_half_tp": None},
        "left to investigate",
        "fits_half_tp == 1 (fits_half_tp = not measured) is not known here",
        2.0,
    ),
    ("lower_tp", {"half_tp_gemm_extra_ms": 1.0}, "prioritised", "predicted +2.000 ms", 2.0),
    ("lower_tp", {"tp": 4, "half_tp_gemm_extra_ms": 1.0}, "not pursued", "it would make TPOT worse", -1.0),
    # On CUDA the n-gram drafter runs on the GPU (vLLM keeps async scheduling on); the CPU drafter
    # applies on CPU hosts. Each pays its own step cost beyond the verify GEMMs.
    ("speculative_decoding", {}, "not applicable", "cuda == 0 (cuda = 1) is false", 4.75),
    (
        "speculative_decoding",
        {"cuda": 0},
        "prioritised",
        "applies: cuda == 0 (cuda = 0); spec_expected_tokens > 1 (spec_expected_tokens = 2)",
        4.75,
    ),
    (
        "speculative_decoding",
        {"cuda": 0, "spec_expected_tokens": 1.0},
        "not applicable",
        "spec_expected_tokens > 1 (spec_expected_tokens = 1) is false",
        -0.5,
    ),
    ("speculative_decoding", {"cuda": 0, "spec_step_extra_ms": 2.5}, "prioritised", "predicted +3.500 ms", 3.5),
    (
        "speculative_decoding_gpu",
        {},
        "prioritised",
        "applies: cuda == 1 (cuda = 1); spec_expected_tokens > 1 (spec_expected_tokens = 2)",
        4.75,
    ),
    ("speculative_decoding_gpu", {"cuda": 0}, "not applicable", "cuda == 1 (cuda = 0) is false", 4.75),
    # the CPU drafter's measured step cost is not the GPU drafter's: 10 - (10 + 0.5 + 0.3) / 2
    ("speculative_decoding_gpu", {"spec_step_extra_ms": 2.5, "spec_gpu_step_extra_ms": 0.3}, "prioritised", "", 4.6),
    ("int4_weights", {}, "rejected", "compromises precision; not adopted whatever it buys (predicted +2.000 ms", 2.0),
    # a model already int4 has no W4A16 trade to reject: the option does not apply (the Kimi-K2 shape)
    ("int4_weights", {"quantized": 1}, "not applicable", "quantized == 0 (quantized = 1) is false", 2.0),
    ("fp8_kv_cache", {}, "rejected", "(predicted +0.536 ms (+5.4% of TPOT))", 0.536),
    # At short context the KV bytes saved are less than what quantising them costs: slower.
    (
        "fp8_kv_cache",
        {"kv_fp8_layer_delta_us": 2.0 - 0.05 * 0.5 * 1000 / 32},
        "rejected",
        "(predicted -0.039 ms (-0.4% of TPOT))",
        -0.039,
    ),
    ("lower_tp", {"half_tp_gemm_extra_ms": 0.5}, "prioritised", "predicted +2.500 ms", 2.5),
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
    figures = {**BASE, "ar_best_us": 12.0, "half_tp_gemm_extra_ms": 1.0}  # all-reduce 1.8 ms, lower TP 2.0, spec 4.75
    record = decide(figures, load_rules())
    ranked = [(o.id, o.rank) for o in record if o.rank]
    assert ranked == [("speculative_decoding_gpu", 1), ("lower_tp", 2), ("allreduce_implementation", 3)]
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


def test_an_input_that_cannot_change_a_gain_is_not_called_an_assumption() -> None:
    from tasks.decisions.formula import matters

    formula = "w4a16_gemm_delta_ms + moe_ms * (1 - moe_w4a16_time_ratio)"
    assert not matters(formula, BASE, "moe_w4a16_time_ratio")  # a dense model: no expert GEMM
    assert matters(formula, BASE | {"moe_ms": 1.5}, "moe_w4a16_time_ratio")
    assert matters(formula, BASE | {"w4a16_gemm_delta_ms": None}, "w4a16_gemm_delta_ms")
