"""The decision record: every option of the rules judged on this campaign's figures, with a
predicted TPOT change, a decision and the clause that decided it.

Each option has `when` (does it apply here) and `gain_ms` (the TPOT it would save); the record
prints each formula with its inputs, ranks the options by predicted gain, and names the clause
that decided each one with the figure behind it, so no reason can contradict the evidence beside
it. Options that compromise precision are rejected whatever they would buy, and still show what
that is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from tasks.decisions.formula import Outcome, explain, fmt_ms
from tasks.decisions.rules import OptionSpec, Rules


class Decision(StrEnum):
    """What the record decides for an option, in the order the record lists them."""

    PRIORITISED = "prioritised"
    LEFT_TO_INVESTIGATE = "left to investigate"
    NOT_PURSUED = "not pursued"
    REJECTED = "rejected"
    NOT_APPLICABLE = "not applicable"


class ShortOf(StrEnum):
    """Why an option is not pursued: what `experiments = "auto"` reads (an option hidden only by
    TPOT's noise is worth an experiment; one that would be slower is not)."""

    NOISE = "inside TPOT's measured spread"
    MIN_GAIN = "below min_gain_pct"
    NO_CHANGE = "no change"
    SLOWER = "slower"


@dataclass
class Option:
    """One option of the rules (its spec) as judged here."""

    spec: OptionSpec
    gain_ms: float | None = None
    gain_pct: float | None = None
    inputs: dict[str, float | None] = field(default_factory=dict)
    decision: Decision = Decision.NOT_APPLICABLE
    reason: str = ""
    rank: int | None = None
    short_of: ShortOf | None = None

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def title(self) -> str:
        return self.spec.title

    @property
    def why(self) -> str:
        return self.spec.why

    @property
    def gain_formula(self) -> str:
        return self.spec.gain_ms

    @property
    def compromises_precision(self) -> bool:
        return self.spec.compromises_precision


def decide(figures: dict[str, float | None], rules: Rules) -> list[Option]:
    """Every option judged on ``figures`` (which include the rules' assumptions), ranked."""
    tpot = figures.get("tpot_ms")
    noise = figures.get("tpot_spread_pct")
    bar_pct = max(rules.min_gain_pct, noise or 0.0)
    bar_what = (
        f"TPOT's measured spread ({noise:.1f}%)"
        if noise and noise > rules.min_gain_pct
        else f"min_gain_pct ({rules.min_gain_pct:g}% of TPOT)"
    )
    record = []
    for spec in rules.options:
        option = Option(spec)
        # The names were checked when the rules loaded: a KeyError here is a figure the vocabulary
        # declares and rule_figures does not give (a bug, tested in tests/test_vocabulary.py).
        applies = explain(spec.when, figures)[0] if spec.when.strip() else Outcome(True, "always")
        gain, names = explain(spec.gain_ms, figures)
        option.inputs = {name: figures.get(name) for name in names}
        option.gain_ms = gain.value
        option.gain_pct = gain.value / tpot * 100 if gain.value is not None and tpot else None
        missing = [name for name, value in option.inputs.items() if value is None]
        predicted = (
            f"predicted {fmt_ms(option.gain_ms)} ms ({option.gain_pct:+.1f}% of TPOT)"
            if option.gain_ms is not None and option.gain_pct is not None
            else ""
        )
        # Applicability first: an option that cannot apply (W4A16 on a model already int4) is no
        # precision trade, and its gain (a prediction for a change that cannot be made) is no advice.
        if applies.value is False:
            option.decision, option.reason = Decision.NOT_APPLICABLE, f"{applies.clause} is false"
        elif option.compromises_precision:
            option.decision = Decision.REJECTED
            option.reason = "compromises precision; not adopted whatever it buys" + (
                f" ({predicted})" if predicted else ""
            )
        elif option.gain_ms is None:
            option.decision = Decision.LEFT_TO_INVESTIGATE
            option.reason = "not measured here: " + ", ".join(missing or ["a figure of its formula"])
        elif option.gain_pct is not None and option.gain_pct < bar_pct:
            option.decision = Decision.NOT_PURSUED
            option.short_of = (
                (ShortOf.NOISE if noise and noise > rules.min_gain_pct else ShortOf.MIN_GAIN)
                if option.gain_ms > 0
                else ShortOf.NO_CHANGE
                if option.gain_ms == 0
                else ShortOf.SLOWER
            )
            option.reason = (
                f"{predicted}: below {bar_what}"
                if option.gain_ms > 0
                else f"{predicted}: no change"
                if option.gain_ms == 0
                else f"{predicted}: it would make TPOT worse"
            )
        elif applies.value is None:
            option.decision = Decision.LEFT_TO_INVESTIGATE
            option.reason = f"{predicted}, but {applies.clause} is not known here"
        else:
            option.decision = Decision.PRIORITISED
            option.reason = f"{predicted}, at or above {bar_what}; applies: {applies.clause}"
        record.append(option)
    chosen = sorted((o for o in record if o.decision == Decision.PRIORITISED), key=lambda o: -(o.gain_ms or 0))
    for rank, option in enumerate(chosen, 1):
        option.rank = rank
    order = list(Decision)
    return sorted(record, key=lambda o: (order.index(o.decision), -(o.gain_ms if o.gain_ms is not None else -1e9)))
