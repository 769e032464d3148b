"""The decision record as it is stored: each option's prediction, decision and inputs, written
when the campaign's own measurements are done and before any experiment runs (so the findings set
the prediction beside what the experiment measured, and never re-predict after the fact)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from tasks.decisions.decide import Decision, ShortOf, decide
from tasks.decisions.estimates import rule_figures
from tasks.decisions.figures import KeyFigures, key_figures
from tasks.decisions.levels import level_figures
from tasks.decisions.rules import Rules, campaign_rules
from tasks.models import Result
from tasks.view import Findings


class OptionPrediction(Result):
    id: str
    title: str
    decision: Decision
    reason: str
    short_of: ShortOf | None = Field(None, description="why it is not pursued (set with that decision)")
    rank: int | None = None
    gain_ms: float | None = None
    gain_pct: float | None = None
    formula: str
    inputs: dict[str, float | None] = Field(default_factory=dict)
    compromises_precision: bool = False

    @model_validator(mode="before")
    @classmethod
    def _short_of_of_an_older_record(cls, data: Any) -> Any:
        """A record stored before `short_of` existed: read from its reason, as it was then."""
        if isinstance(data, dict) and "short_of" not in data and data.get("decision") == Decision.NOT_PURSUED:
            gain = data.get("gain_ms") or 0.0
            reason = data.get("reason", "")
            data = data | {
                "short_of": (ShortOf.NOISE if "spread" in reason else ShortOf.MIN_GAIN)
                if gain > 0
                else ShortOf.NO_CHANGE
                if gain == 0
                else ShortOf.SLOWER
            }
        return data


class LevelPrediction(Result):
    """Every option's predicted ΔTPOT at one concurrency the campaign served (tasks/decisions/levels.py)."""

    concurrency: int
    tpot_ms: float | None
    gains_ms: dict[str, float | None] = Field(description="option id -> predicted ΔTPOT ms (None: not known here)")
    scaled: list[str] = Field(
        default_factory=list, description="traced figures carried from the capture's level by the micros' ratio"
    )
    inputs: dict[str, dict[str, float | None]] = Field(
        default_factory=dict,
        description="option id -> the figures its formula read at this level (a record stored before this field"
        " has none: its misses away from the capture's level are not broken down)",
    )

    def gain_pct(self, option: str) -> float | None:
        gain = self.gains_ms.get(option)
        return gain / self.tpot_ms * 100 if gain is not None and self.tpot_ms else None


class DecisionRecord(Result):
    tpot_ms: float | None = Field(description="TPOT the predictions are against (the capture's level)")
    concurrency: int = Field(description="the level the predictions are made at (the capture's concurrency)")
    noise_pct: float | None = Field(None, description="TPOT's spread there, % of the median")
    min_gain_pct: float
    rules: str
    assumptions: dict[str, float]
    earlier: dict[str, str] = Field(
        default_factory=dict,
        description="assumptions an earlier campaign's experiment measured (same hardware, shape, vLLM): name ->"
        " its ledger record; their values are in `assumptions`",
    )
    figures: dict[str, float | None] = Field(description="every figure the rules could read, as measured")
    options: list[OptionPrediction]
    levels: list[LevelPrediction] = Field(
        default_factory=list, description="the predictions at every concurrency served (the capture's among them)"
    )

    def option(self, option_id: str) -> OptionPrediction | None:
        return next((o for o in self.options if o.id == option_id), None)

    def level(self, concurrency: int) -> LevelPrediction | None:
        return next((level for level in self.levels if level.concurrency == concurrency), None)


def make_record(findings: Findings, log: Any = None) -> DecisionRecord:
    """The record of this campaign's figures under its rules (``log``: a line per option)."""
    figures = key_figures(findings)
    rules = campaign_rules(findings)
    values = rule_figures(figures, rules.assumptions)
    record = decide(values, rules)
    for option in record:
        if log is not None:
            log(f"{option.id}: {option.decision} ({option.reason})")
    return DecisionRecord(
        tpot_ms=values.get("tpot_ms"),
        concurrency=figures.capture_concurrency,
        noise_pct=values.get("tpot_spread_pct"),
        min_gain_pct=rules.min_gain_pct,
        rules=str(rules.path),
        assumptions=rules.assumptions,
        earlier=rules.earlier,
        figures={k: _number(v) for k, v in values.items()},
        options=[
            OptionPrediction(
                id=o.id,
                title=o.title,
                decision=o.decision,
                reason=o.reason,
                short_of=o.short_of,
                rank=o.rank,
                gain_ms=o.gain_ms,
                gain_pct=o.gain_pct,
                formula=o.gain_formula,
                inputs={k: _number(v) for k, v in o.inputs.items()},
                compromises_precision=o.compromises_precision,
            )
            for o in record
        ],
        levels=predictions_by_level(figures, rules),
    )


def predictions_by_level(figures: KeyFigures, rules: Rules) -> list[LevelPrediction]:
    """Each option's predicted ΔTPOT at every concurrency with a measured TPOT."""
    levels = []
    for concurrency in sorted(figures.tpot_by_concurrency):
        values, scaled = level_figures(figures, rules.assumptions, concurrency)
        options = decide(values, rules)
        levels.append(
            LevelPrediction(
                concurrency=concurrency,
                tpot_ms=values.get("tpot_ms"),
                gains_ms={o.id: _number(o.gain_ms) for o in options},
                scaled=scaled,
                inputs={o.id: {k: _number(v) for k, v in o.inputs.items()} for o in options},
            )
        )
    return levels


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
