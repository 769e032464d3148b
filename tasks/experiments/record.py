"""The decision record as a todo: what the campaign predicted for each option, stored when the
campaign's own measurements were done, before any experiment ran, so the findings can set the
prediction beside what the experiment then measured (and never re-predict after the fact)."""

from __future__ import annotations

from orchestrator.campaign import TaskContext
from tasks.experiments.results import DecisionRecord, OptionPrediction
from tasks.session import Session


def decision_record_action(session: Session, declared: frozenset[str] | None = None):
    """``declared``: the task ids the campaign's units may declare (what the record may read)."""

    def run(ctx: TaskContext) -> DecisionRecord:
        from tasks.synthesis.decisions import campaign_rules, decide
        from tasks.synthesis.estimates import rule_figures
        from tasks.synthesis.figures import key_figures
        from tasks.view import Findings

        findings = Findings(session, ctx.state, session.reports_dir / ctx.state.campaign, declared=declared)
        figures = key_figures(findings)
        rules = campaign_rules(findings)
        values = rule_figures(figures, rules.assumptions)
        record = decide(values, rules)
        for option in record:
            ctx.log(f"{option.id}: {option.decision} ({option.reason})")
        return DecisionRecord(
            tpot_ms=values.get("tpot_ms"),
            concurrency=figures.capture_concurrency,
            noise_pct=values.get("tpot_spread_pct"),
            min_gain_pct=rules.min_gain_pct,
            rules=str(rules.path),
            assumptions=rules.assumptions,
            figures={k: _number(v) for k, v in values.items()},
            options=[
                OptionPrediction(
                    id=o.id,
                    title=o.title,
                    decision=o.decision,
                    reason=o.reason,
                    rank=o.rank,
                    gain_ms=o.gain_ms,
                    gain_pct=o.gain_pct,
                    formula=o.gain_formula,
                    inputs={k: _number(v) for k, v in o.inputs.items()},
                    compromises_precision=o.compromises_precision,
                )
                for o in record
            ],
        )

    return run


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
