"""The ledger's honest summary: errors of the predictions made before their experiments, per
option and overall, the calibrated figures kept apart, what each prediction rested on, and the
spread of the realised change between repeated campaigns of one configuration."""

from __future__ import annotations

from tasks.decisions.ledger import LedgerRecord, summary_lines


def record(campaign: str, option: str, predicted: float, realised: float, low: float, high: float) -> LedgerRecord:
    return LedgerRecord(
        id=f"{campaign}/{option}",
        campaign=campaign,
        experiment=option,
        option=option,
        change="x",
        model="m 4x256 bf16 TP2",
        hardware="cpu",
        vllm="0.32.0",
        concurrency=1,
        predicted_ms=predicted,
        realised_ms=realised,
        realised_low_ms=low,
        realised_high_ms=high,
        calibrated_ms=realised,
        provenance={
            "moe_w4a16_time_ratio": "measured: gemm_bench, in place of the assumed 0.5",
            "spec_tokens": "assumed",
        },
        recorded_at="2026-12-04T00:00:00Z",
    )


def test_the_summary_is_per_option_with_repeats_and_provenance() -> None:
    records = [
        record("a", "int4_weights", +0.2, -0.4, -0.45, -0.35),  # wrong sign, outside the noise
        record("b", "int4_weights", -0.3, -0.5, -0.55, -0.45),
        record("a", "speculative_decoding", 2.2, 2.0, 1.9, 2.1),
    ]
    lines = summary_lines(records)
    assert lines[0].endswith("predictions made before their experiment: 40.0% (3 records)")  # 150%, 40%, 10%
    int4 = next(line for line in lines if line.startswith("- int4_weights"))
    assert "2 record(s), median error 95.0%" in int4 and "wrong sign outside the noise 1" in int4
    assert "moe_w4a16_time_ratio measured" in int4 and "spec_tokens assumed" in int4
    assert any(line.startswith("median |calibrated") and "not a prediction" in line for line in lines)
    [repeated] = [line for line in lines if line.startswith("repeated:")]
    assert "int4_weights" in repeated and "-0.500 to -0.400 ms" in repeated and "spread 22%" in repeated
