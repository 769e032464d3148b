"""An option's `apply` at a campaign's tensor parallelism: the server change its experiment makes
by default, and that change as the findings and the ledger write it. One home for both, so the
experiments that apply a change and the earlier records that must match it agree on its text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tasks.decisions.formula import evaluate
from tasks.redaction import redacted_env


@dataclass(frozen=True)
class AppliedChange:
    """The server change an option's rule applies (extra vLLM args, environment, model, TP)."""

    extra_args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    model: str | None = None
    tensor_parallel: int | None = None

    @property
    def empty(self) -> bool:
        return not (self.extra_args or self.env or self.model or self.tensor_parallel)

    def describe(self) -> str:
        parts = [" ".join(self.extra_args)] if self.extra_args else []
        parts += [f"{k}={v}" for k, v in redacted_env(dict(self.env)).items()]  # values may be tokens
        if self.model:
            parts.append(f"model {self.model}")
        if self.tensor_parallel:
            parts.append(f"TP {self.tensor_parallel}")
        return "; ".join(parts) or "no change"


def rule_change(option: Any, tp: int) -> tuple[AppliedChange | None, str]:
    """The rule's own `apply` at TP ``tp`` (option: a rules OptionSpec; not imported, as the rules
    load the earlier records, which read this module), or None and why it cannot be applied by
    configuration alone."""
    apply = option.apply
    if apply is None or apply.requires:
        return None, (apply.requires if apply else "the rule has no `apply`")
    new_tp = apply.tensor_parallel
    if isinstance(new_tp, str):
        value = evaluate(new_tp, {"tp": float(tp)})
        if value is None or value < 1 or value != int(value):
            return None, f"tensor_parallel = {new_tp} gives {value} at TP {tp}"
        new_tp = int(value)
    change = AppliedChange(tuple(apply.extra_args), tuple(sorted(apply.env.items())), apply.model, new_tp)
    return (None, "its `apply` changes nothing") if change.empty else (change, "")
