"""Predicted against realised: what each experiment found, computed once from typed results.

Realised ΔTPOT is at the level the prediction was made for (the capture's concurrency): the
campaign's TPOT there minus the variant's, each the median of its runs' means, the interval
from their min-max (the widest difference the runs allow). The prediction is the one the
decision record stored before the experiment ran. The calibrated prediction re-evaluates the
option's formula with the inputs the experiment measured (its rule's `measured` entries) in
place of the assumptions; what is still assumed is named.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tasks.decisions.estimates import rule_figures
from tasks.decisions.figures import KeyFigures, key_figures
from tasks.decisions.formula import evaluate, matters
from tasks.decisions.vocabulary import provenance
from tasks.experiments.chain import SHADOWED, chain_ids
from tasks.experiments.config import Experiment
from tasks.experiments.results import DecisionRecord
from tasks.macro.results import LevelSummary
from tasks.model.results import MODEL_FACTS
from tasks.view import Findings


@dataclass
class Realised:
    base_ms: float | None
    variant_ms: float | None
    delta_ms: float | None
    low_ms: float | None
    high_ms: float | None
    runs: str


@dataclass
class LevelCheck:
    """The prediction and the realised change at one concurrency both campaigns served."""

    concurrency: int
    predicted_ms: float | None
    realised: Realised
    verdict: str
    ratio: float | None


@dataclass
class Verification:
    experiment: Experiment
    predicted_ms: float | None
    predicted_pct: float | None
    decision: str
    formula: str
    realised: Realised
    verdict: str
    ratio: float | None
    calibrated_ms: float | None = None
    measured_inputs: dict[str, float | None] = field(default_factory=dict)
    still_assumed: list[str] = field(default_factory=list)
    variant_figures: dict[str, float | None] = field(default_factory=dict)
    base_figures: dict[str, float | None] = field(default_factory=dict)
    measured_expressions: dict[str, str] = field(default_factory=dict)
    complete: bool = True
    failure: str | None = None
    """The chain's failed todo and its error, where one failed."""
    notes: list[str] = field(default_factory=list)
    levels: list[LevelCheck] = field(default_factory=list)
    """Every level the record predicted and both the campaign and the variant served."""

    @property
    def calibrated_ratio(self) -> float | None:
        delta = self.realised.delta_ms
        if self.calibrated_ms is None or not delta:
            return None
        return self.calibrated_ms / delta


def variant_findings(findings: Findings, experiment: Experiment) -> Findings:
    """The results as the experiment measured them: its chain's for the shadowed tasks (none
    where it did not run one), the campaign's for the rest (model facts where the model is
    the same, the micros)."""
    ids = chain_ids(experiment)
    overrides: dict[str, str | None] = {
        ref.id: ids.get(ref.id) for ref in SHADOWED if ref.id in ids or ref != MODEL_FACTS
    }
    return findings.seen_through(overrides)


def level_checks(record: DecisionRecord, option: str, base: KeyFigures, variant: KeyFigures) -> list[LevelCheck]:
    checks = []
    for level in record.levels:
        real = realised(level_at(base, level.concurrency), level_at(variant, level.concurrency))
        if real.delta_ms is None:
            continue  # the variant did not serve this level (`serving = "single"`)
        predicted = level.gains_ms.get(option)
        text, ratio = verdict(predicted, real)
        checks.append(LevelCheck(level.concurrency, predicted, real, text, ratio))
    return checks


def level_at(figures: KeyFigures, concurrency: int) -> LevelSummary | None:
    if concurrency == 1 and figures.single:
        return figures.single.single_stream
    return next(
        (level for level in (figures.sweep.levels if figures.sweep else []) if level.concurrency == concurrency), None
    )


def realised(base: LevelSummary | None, variant: LevelSummary | None) -> Realised:
    def middle(level: LevelSummary | None) -> tuple[float | None, float | None, float | None]:
        if level is None:
            return None, None, None
        spread = level.noise.tpot_ms_mean if level.noise else None
        if spread and spread.runs >= 2 and spread.median is not None:
            return spread.median, spread.low, spread.high
        return level.tpot_ms.mean, level.tpot_ms.mean, level.tpot_ms.mean

    b, b_low, b_high = middle(base)
    v, v_low, v_high = middle(variant)
    if b is None or v is None:
        return Realised(b, v, None, None, None, "not measured at this level")
    runs = (
        f"{base.noise.tpot_ms_mean.runs if base and base.noise else 1} runs each side, median of the runs'"
        " mean TPOT; interval: the runs' min-max on both sides"
    )
    return Realised(b, v, b - v, b_low - v_high, b_high - v_low, runs)


def verdict(predicted: float | None, real: Realised) -> tuple[str, float | None]:
    if real.delta_ms is None or predicted is None:
        return "not verified: " + ("no prediction" if predicted is None else real.runs), None
    ratio = predicted / real.delta_ms if real.delta_ms else None
    inside = real.low_ms <= predicted <= real.high_ms
    noise_only = real.low_ms <= 0 <= real.high_ms
    if inside:
        text = "prediction inside the measured interval"
    elif (predicted > 0) != (real.delta_ms > 0) and not noise_only:
        text = "**wrong sign**: outside the measured interval"
    else:
        text = f"**outside the measured interval** (the prediction is {'high' if predicted > real.high_ms else 'low'})"
    if noise_only:
        text += "; the change itself is within the runs' noise"
    return text, ratio


def variant_rule_figures(findings: Findings, experiment: Experiment, rules: object) -> dict[str, float | None]:
    """The variant's figures in the rules' vocabulary, each named x_<figure>, plus the speculative
    decoding counters of its run at the prediction's level."""

    view = variant_findings(findings, experiment)
    figures = key_figures(view)
    values = rule_figures(figures, rules.assumptions)  # type: ignore[attr-defined]
    out = {f"x_{k}": v for k, v in values.items()}
    levels = ([figures.single.single_stream] if figures.single else []) + (
        figures.sweep.levels if figures.sweep else []
    )
    level = next((level for level in levels if level.spec_decode), None)
    spec = level.spec_decode if level else None
    out["x_spec_mean_acceptance_length"] = spec.mean_acceptance_length if spec else (1.0 if levels else None)
    out["x_spec_drafts"] = float(spec.drafts) if spec else (0.0 if levels else None)
    out["x_spec_tokens_per_step"] = spec_tokens_per_step(level) if level else (1.0 if levels else None)
    return out


def spec_tokens_per_step(level: LevelSummary) -> float | None:
    """Tokens a decode step yielded under speculative decoding: the decode tokens (output tokens
    after each request's first) over the streamed chunks after each request's first, a direct
    count of the steps, since vLLM streams a step's tokens in one chunk (the H200's base campaign:
    1512 chunks for 1512 decode tokens, one a token), and vLLM's counters (steps = decode tokens -
    accepted), the smaller of the two. Each can only overstate: the counters count drafts accepted
    past max_tokens, which the scheduler trims after counting (the H200's Qwen3-MoE: 3.706 from the
    counters, 3.36 counted, 3.349 from the drafter replayed over the base's outputs), and the API
    server merges a request's outputs into one chunk when the engine gets ahead of the client
    (vLLM's RequestOutputCollector), which a faster speculative step makes likelier. Not vLLM's mean
    acceptance length (1 + accepted / drafts), which leaves out the steps the drafter found nothing for."""
    spec = level.spec_decode
    decode_tokens = (level.output_tokens or 0) - (level.completed or 0)
    if spec is None or decode_tokens <= 0:
        return None
    counted = [decode_tokens / level.itl_ms.count] if level.itl_ms.count else []
    if spec.accepted_tokens < decode_tokens:
        counted.append(decode_tokens / (decode_tokens - spec.accepted_tokens))
    return min(counted, default=None)


def verify(findings: Findings, record: DecisionRecord, experiment: Experiment, rules: object) -> Verification:

    option = record.option(experiment.option)
    base_figures = key_figures(findings)
    variant = key_figures(variant_findings(findings, experiment))
    real = realised(level_at(base_figures, record.concurrency), level_at(variant, record.concurrency))
    predicted = option.gain_ms if option else None
    text, ratio = verdict(predicted, real)
    result = Verification(
        experiment,
        predicted,
        option.gain_pct if option else None,
        option.decision if option else "not in the record",
        option.formula if option else "",
        real,
        text,
        ratio,
    )
    result.levels = level_checks(record, experiment.option, base_figures, variant)
    spec = rules.specs.get(experiment.option)  # type: ignore[attr-defined]
    if spec is None or option is None:
        return result

    x = variant_rule_figures(findings, experiment, rules)
    result.variant_figures = x
    # The record's figures as written; a figure a newer rules file reads that the record predates
    # comes from the base's results now (the same measurements).
    result.base_figures = rule_figures(base_figures, rules.assumptions) | record.figures  # type: ignore[attr-defined]
    every = result.base_figures | x
    result.measured_expressions = dict(spec.measured)
    for name, expression in spec.measured.items():
        try:
            result.measured_inputs[name] = evaluate(expression, every)
        except (KeyError, ValueError, SyntaxError):
            result.measured_inputs[name] = None
    measured = {k: v for k, v in result.measured_inputs.items() if v is not None}
    try:
        result.calibrated_ms = evaluate(option.formula, record.figures | measured)
    except (KeyError, ValueError, SyntaxError):
        result.calibrated_ms = None
    figures = record.figures | measured
    result.still_assumed = sorted(
        name
        for name in option.inputs
        if name not in measured
        and provenance(name, record.figures, record.assumptions, record.earlier).startswith("assumed")
        and matters(option.formula, figures, name)
    )
    missing = [
        name
        for name, value in result.measured_inputs.items()
        if value is None and matters(option.formula, figures, name)
    ]
    if missing:
        result.notes.append(
            "not measured by this experiment: "
            + ", ".join(missing)
            + (
                f" (no TPOT of the variant at c={record.concurrency}: see the experiment's verdict)"
                if real.variant_ms is None
                else ""
                if experiment.capture
                else " (capture = false: no trace of the variant)"
            )
            + "; the calibrated prediction keeps the base campaign's value"
        )
    return result
