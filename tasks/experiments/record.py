"""The decision record as a todo: what the campaign predicted for each option, stored when the
campaign's own measurements were done, before any experiment ran, so the findings can set the
prediction beside what the experiment then measured (and never re-predict after the fact)."""

from __future__ import annotations

from pydantic import Field

from orchestrator.campaign import TaskContext
from tasks.session import Session
from tasks.unit import Result


class OptionPrediction(Result):
    id: str
    title: str
    decision: str
    reason: str
    rank: int | None = None
    gain_ms: float | None = None
    gain_pct: float | None = None
    formula: str
    inputs: dict[str, float | None] = Field(default_factory=dict)
    compromises_precision: bool = False


class DecisionRecord(Result):
    tpot_ms: float | None = Field(description="TPOT the predictions are against (the capture's level)")
    concurrency: int = Field(description="the level the predictions are made at (the capture's concurrency)")
    noise_pct: float | None = Field(None, description="TPOT's spread there, % of the median")
    min_gain_pct: float
    rules: str
    assumptions: dict[str, float]
    figures: dict[str, float | None] = Field(description="every figure the rules could read, as measured")
    options: list[OptionPrediction]

    def option(self, option_id: str) -> OptionPrediction | None:
        return next((o for o in self.options if o.id == option_id), None)


def decision_record_action(session: Session):
    def run(ctx: TaskContext) -> DecisionRecord:
        from tasks.synthesis.decisions import campaign_rules, decide
        from tasks.synthesis.estimates import rule_figures
        from tasks.synthesis.figures import key_figures
        from tasks.view import Findings

        findings = Findings(session, ctx.state, session.reports_dir / ctx.state.campaign)
        figures = key_figures(findings)
        rules = campaign_rules(findings)
        values = rule_figures(figures, rules.assumptions)
        record = decide(values, rules)
        for option in record:
            ctx.log(f"{option.id}: {option.decision} ({option.reason})")
        return DecisionRecord(
            tpot_ms=values.get("tpot_ms"), concurrency=figures.capture_concurrency,
            noise_pct=values.get("tpot_spread_pct"), min_gain_pct=rules.min_gain_pct, rules=str(rules.path),
            assumptions=rules.assumptions, figures={k: _number(v) for k, v in values.items()},
            options=[OptionPrediction(id=o.id, title=o.title, decision=o.decision, reason=o.reason, rank=o.rank,
                                      gain_ms=o.gain_ms, gain_pct=o.gain_pct, formula=o.gain_formula,
                                      inputs={k: _number(v) for k, v in o.inputs.items()},
                                      compromises_precision=o.compromises_precision) for o in record])

    return run


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
