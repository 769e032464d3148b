"""The decision record: options from `decision_rules.toml`, judged on the campaign's evidence."""

from __future__ import annotations

import ast
import operator
import tomllib
from pathlib import Path
from typing import Any

from orchestrator.errors import InputError

RULES_PATH = Path(__file__).with_name("decision_rules.toml")
_COMPARE = {ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Eq: operator.eq, ast.NotEq: operator.ne}


def evaluate(expression: str, figures: dict[str, float | None]) -> bool | None:
    """A condition of names, numbers, comparisons, `and`/`or`; None when a figure is missing."""
    def value(node: ast.AST) -> Any:
        if isinstance(node, ast.BoolOp):
            parts = [value(v) for v in node.values]
            if isinstance(node.op, ast.And):
                return False if False in parts else (None if None in parts else True)
            return True if True in parts else (None if None in parts else False)
        if isinstance(node, ast.Compare):
            left = value(node.left)
            for op, right_node in zip(node.ops, node.comparators, strict=True):
                right = value(right_node)
                if left is None or right is None:
                    return None
                if not _COMPARE[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.Name):
            if node.id not in figures:
                raise KeyError(node.id)
            return figures[node.id]
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return node.value
        raise ValueError(f"unsupported syntax {ast.dump(node)[:60]}")

    return value(ast.parse(expression, mode="eval").body)


def decide(figures: dict[str, float | None], rules_path: Path = RULES_PATH) -> list[dict[str, Any]]:
    try:
        options = tomllib.loads(rules_path.read_text())["option"]
    except (KeyError, tomllib.TOMLDecodeError) as err:
        raise InputError(f"{rules_path}: bad decision rules ({err}); each [[option]] needs id, title, when, why") from None
    record = []
    for option in options:
        try:
            holds = evaluate(option["when"], figures)
        except (KeyError, ValueError, SyntaxError) as err:
            raise InputError(f"{rules_path}: option '{option.get('id')}': field 'when': {err}") from None
        evidence = ", ".join(f"{name} = {_fmt(figures.get(name))}" for name in sorted(figures)
                             if name in option["when"])
        if option.get("compromises_precision"):
            decision = "rejected"
            reason = ("compromises precision; not adopted whatever the speed-up"
                      + (f" (it would apply: {option['why']})" if holds else ""))
        elif holds is None:
            decision, reason = "left to investigate", "a figure it needs was not measured in this campaign"
        elif holds:
            decision, reason = "prioritised", option["why"]
        else:
            decision, reason = "not pursued", option.get("otherwise", "its condition does not hold")
        record.append({"id": option["id"], "title": option["title"], "condition": option["when"],
                       "evidence": evidence, "decision": decision, "reason": reason})
    return record


def _fmt(value: float | None) -> str:
    if value is None:
        return "not measured"
    return f"{value:.3g}" if isinstance(value, float) else str(value)
