"""The `experiments` unit's refs and result models: the decision record, stored before any
experiment ran (so the findings set each prediction beside what its experiment measured)."""

from __future__ import annotations

from pydantic import Field

from orchestrator.refs import TaskRef
from tasks.models import Result


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


DECISION_RECORD = TaskRef("decision_record", DecisionRecord)
