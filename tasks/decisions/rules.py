"""The decision rules file: its schema, loaded into typed options and checked against the
vocabulary (every name a formula reads), so a mistake is exit 2 at `init`/`check`.

Each option has `when` (does it apply here: a condition on the campaign's figures) and `gain_ms`
(the TPOT it would save, an arithmetic expression of measured figures and stated assumptions).
The record prints each formula with its inputs, ranks the options by predicted gain, and names
the clause that decided each one with the figure behind it, so no reason can contradict the
evidence beside it. Options that compromise precision are rejected whatever they would buy, and
still show what that is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestrator.errors import InputError
from orchestrator.tomlfile import read_toml
from tasks.decisions.drafter_settings import drafter_mismatch
from tasks.decisions.formula import formula_names, unknown_name
from tasks.decisions.vocabulary import DERIVED_FROM_ASSUMPTIONS, FIGURES, variant_names

RULES_PATH = Path(__file__).with_name("decision_rules.toml")
DEFAULT_MIN_GAIN_PCT = 3.0


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # TOML has types: "3" is no number


class ApplySpec(_Strict):
    """How an experiment applies the option by configuration (its default; [[experiments]] may
    replace it). ``tensor_parallel`` may be an expression of the rule figures, e.g. "tp / 2"."""

    extra_args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    tensor_parallel: int | str | None = None
    model: str | None = None
    requires: str | None = Field(
        None,
        description="what a user must give for it to be applied (then"
        " `experiments = 'auto'` leaves it out and says this)",
    )


class OptionSpec(_Strict):
    id: str = Field(pattern=r"^[a-z0-9_]{1,40}$")
    title: str
    when: str
    gain_ms: str
    why: str
    compromises_precision: bool = False
    apply: ApplySpec | None = None
    measured: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "after an experiment: each formula input -> an expression of the variant's figures (x_...)"
            " and the campaign's; the record is re-evaluated with these in place of the assumptions"
        ),
    )


class RulesFile(_Strict):
    min_gain_pct: float = DEFAULT_MIN_GAIN_PCT
    assumptions: dict[str, float] = Field(default_factory=dict)
    option: list[OptionSpec] = Field(min_length=1)


@dataclass
class Rules:
    """A rules file, loaded and checked: its options (typed, in file order), assumptions, bar."""

    options: list[OptionSpec]
    assumptions: dict[str, float]
    min_gain_pct: float
    path: Path
    earlier: dict[str, str] = field(default_factory=dict)
    """Assumptions an earlier campaign measured (tasks/decisions/earlier.py): name -> its record."""

    @property
    def specs(self) -> dict[str, OptionSpec]:
        return {option.id: option for option in self.options}


def load_rules(path: Path = RULES_PATH) -> Rules:
    """The rules file, every key checked (a misspelt key is an error, not a silent default)."""
    document = read_toml(path)
    try:
        parsed = RulesFile.model_validate(document)
    except ValidationError as err:
        raise InputError(rules_error(path, document, err)) from None
    check_vocabulary(path, parsed)
    ids = [option.id for option in parsed.option]
    if len(set(ids)) != len(ids):
        raise InputError(
            f"{path}: an option id appears twice ({sorted(i for i in ids if ids.count(i) > 1)[0]});"
            " give each [[option]] its own id"
        )
    return Rules(list(parsed.option), parsed.assumptions, parsed.min_gain_pct, path)


def check_vocabulary(path: Path, parsed: RulesFile) -> None:
    """Every formula reads only the declared figures and the file's own assumptions; every
    `measured` key is an input of its option's formula; assumptions are finite numbers, rates in
    [0, 1). Checked at load, so `init` and `check` refuse a misspelt name (exit 2)."""
    for name, value in parsed.assumptions.items():
        if not math.isfinite(value):
            raise InputError(f"{path}: assumptions.{name}: {value} is not a finite number; give a number")
        if name.endswith("_rate") and not 0 <= value < 1:
            raise InputError(f"{path}: assumptions.{name}: {value:g} is a rate, so in [0, 1); fix it")
    base = set(FIGURES) | set(parsed.assumptions)
    for option in parsed.option:
        read: set[str] = set()
        for key in ("when", "gain_ms"):
            where = f"option '{option.id}' key '{key}'"
            expression = getattr(option, key)
            names = formula_names(path, where, expression) if expression.strip() else set()
            for name in sorted(names - base):
                raise unknown_name(path, where, name, base)
            read |= names
        for name in sorted(read & set(DERIVED_FROM_ASSUMPTIONS)):
            for needed in DERIVED_FROM_ASSUMPTIONS[name]:
                if needed not in parsed.assumptions:
                    raise InputError(
                        f"{path}: option '{option.id}': '{name}' is computed from the assumption '{needed}',"
                        " which [assumptions] does not give; add it"
                    )
        for name, expression in option.measured.items():
            where = f"option '{option.id}' key 'measured.{name}'"
            if name not in read:
                raise InputError(
                    f"{path}: {where}: '{name}' is no input of this option's when/gain_ms"
                    f" ({', '.join(sorted(read)) or 'none'}); name one of them"
                )
            for unknown in sorted(formula_names(path, where, expression) - base - variant_names()):
                raise unknown_name(path, where, unknown, base | variant_names())
        if option.apply is not None and (mismatch := drafter_mismatch(option.apply.extra_args, parsed.assumptions)):
            raise InputError(
                f"{path}: option '{option.id}' key 'apply.extra_args': its --speculative-config sets {mismatch}"
                " in [assumptions], so the prediction would describe another drafter than the experiment runs;"
                " make the two equal"
            )
        if option.apply is not None and isinstance(option.apply.tensor_parallel, str):
            where = f"option '{option.id}' key 'apply.tensor_parallel'"
            for unknown in sorted(formula_names(path, where, option.apply.tensor_parallel) - {"tp"}):
                raise InputError(f"{path}: {where}: unknown name '{unknown}'; it may read only tp")


def rules_error(path: Path, document: dict[str, Any], err: ValidationError) -> str:
    """One line: the option (by id), the key and what is wrong with it."""
    first = err.errors()[0]
    loc = list(first["loc"])
    where = ".".join(str(part) for part in loc)
    if len(loc) >= 2 and loc[0] == "option" and isinstance(loc[1], int):
        options = document.get("option") or []
        option_id = options[loc[1]].get("id", f"#{loc[1] + 1}") if loc[1] < len(options) else f"#{loc[1] + 1}"
        where = f"option '{option_id}' key '{'.'.join(str(p) for p in loc[2:]) or '(the table)'}'"
    fix = (
        "unknown key: check its spelling against decision_rules.toml's header"
        if first["type"] == "extra_forbidden"
        else "each [[option]] needs id, title, when, gain_ms, why"
    )
    return f"{path}: {where}: {first['msg']}; {fix}"


def session_rules(session: Any) -> Rules:
    """The shipped decision rules, or the file `campaign.decision_rules` names (session:
    tasks.session.Session), loaded once a session: every reader gets the same checked rules."""
    cache = session.plans if session is not None else {}
    if "decision_rules" not in cache:
        chosen = session.config.campaign.decision_rules if session is not None else None
        if chosen and not Path(chosen).is_file():
            raise InputError(
                f"{session.config_file}: field 'campaign.decision_rules': {chosen} is not a file;"
                " name a decision rules TOML file, or leave it out for the shipped one"
            )
        cache["decision_rules"] = load_rules(Path(chosen) if chosen else RULES_PATH)
    return cache["decision_rules"]


def campaign_rules(findings: Any) -> Rules:
    """The campaign's decision rules (findings: tasks.view.Findings), with the assumptions earlier
    campaigns on the same hardware, shape and vLLM measured in their place (once a view)."""
    from tasks.decisions.earlier import with_earlier  # the ledger and the units' results: not at rules load

    cache = getattr(findings, "cache", None)
    if cache is None:
        return with_earlier(session_rules(findings.session), findings)
    if "rules" not in cache:
        cache["rules"] = with_earlier(session_rules(findings.session), findings)
    return cache["rules"]
