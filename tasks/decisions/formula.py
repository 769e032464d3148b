"""The formula language of the decision rules: conditions and arithmetic over named figures,
evaluated with None for what the campaign did not measure (a condition is still decided where
its known clauses decide it), and parsed at load to list the names a formula reads."""

from __future__ import annotations

import ast
import difflib
import math
import operator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.errors import InputError
from tasks.decisions.vocabulary import FUNCTIONS

_COMPARE = {
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}
_ARITHMETIC = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}
_FUNCTIONS = {"min": min, "max": max, "abs": abs}  # tasks/synthesis/vocabulary.py FUNCTIONS


@dataclass
class Outcome:
    """An expression's value and, for conditions, the clause that decided it (with its figures)."""

    value: Any
    clause: str = ""


class _Evaluator:
    def __init__(self, source: str, figures: dict[str, float | None]) -> None:
        self.source, self.figures = source, figures
        self.names: list[str] = []

    def text(self, node: ast.AST) -> str:
        segment = ast.get_source_segment(self.source, node) or ""
        used = sorted({n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id not in _FUNCTIONS})
        return segment + (
            " (" + ", ".join(f"{n} = {fmt_figure(self.figures.get(n))}" for n in used) + ")" if used else ""
        )

    def run(self, node: ast.AST) -> Outcome:
        if isinstance(node, ast.BoolOp):
            parts = [self.run(v) for v in node.values]
            decisive = False if isinstance(node.op, ast.And) else True
            for part in parts:
                if part.value is decisive:
                    return part
            unknown = [p for p in parts if p.value is None]
            if unknown:
                return Outcome(None, unknown[0].clause)
            return Outcome(not decisive, "; ".join(p.clause for p in parts))
        if isinstance(node, ast.Compare):
            left = self.run(node.left).value
            holds: bool | None = True
            for op, right_node in zip(node.ops, node.comparators, strict=True):
                right = self.run(right_node).value
                if left is None or right is None:
                    holds = None
                    break
                if not _COMPARE[type(op)](left, right):
                    holds = False
                    break
                left = right
            return Outcome(holds, self.text(node))
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
            left, right = self.run(node.left).value, self.run(node.right).value
            if isinstance(node.op, ast.Mult) and 0 in (left, right):
                return Outcome(0.0)  # zero times anything, measured or not (no MoE layer: no gain)
            if left is None or right is None:
                return Outcome(None)
            try:
                value = _ARITHMETIC[type(node.op)](float(left), float(right))
            except (ZeroDivisionError, OverflowError):
                return Outcome(None)
            # Floats, not Python's unbounded ints: `10 ** 10 ** 10` overflows at once instead of
            # computing for hours; a complex (a negative to a fractional power) or inf is no figure.
            return Outcome(value if isinstance(value, float) and math.isfinite(value) else None)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            value = self.run(node.operand).value
            return Outcome(None if value is None else -value)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS:
            values = [self.run(a).value for a in node.args]
            return Outcome(None if None in values or not values else _FUNCTIONS[node.func.id](*values))
        if isinstance(node, ast.Name):
            if node.id not in self.figures:
                raise KeyError(node.id)
            self.names.append(node.id)
            return Outcome(self.figures[node.id], self.text(node))
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return Outcome(node.value)
        raise ValueError(f"unsupported syntax {ast.dump(node)[:60]}")


def evaluate(expression: str, figures: dict[str, float | None]) -> Any:
    """A condition or arithmetic of figure names and numbers; None where a figure it needs is
    missing (a condition is still False or True where the known clauses decide it)."""
    return explain(expression, figures)[0].value


def matters(expression: str, figures: dict[str, float | None], name: str) -> bool:
    """Whether ``name`` changes the expression's value here (a MoE term on a dense model does
    not): an input that cannot change the gain is neither assumed nor missing."""
    try:
        values = {evaluate(expression, figures | {name: value}) for value in (1.0, 2.0)}
    except (KeyError, ValueError, SyntaxError):
        return True
    return len(values) > 1 or values == {None}


def explain(expression: str, figures: dict[str, float | None]) -> tuple[Outcome, list[str]]:
    """The expression's outcome and the figure names it read."""
    evaluator = _Evaluator(expression, figures)
    outcome = evaluator.run(ast.parse(expression, mode="eval").body)
    return outcome, list(dict.fromkeys(evaluator.names))


def value_for(expression: str, figures: dict[str, float | None], name: str, target: float) -> float | None:
    """The value of ``name`` alone (every other figure as given) that makes the expression equal
    ``target``: secant steps from the figure's own value, checked by evaluating the result; None where
    none is found (the name cannot reach it: a clamp such as max(0, ...) or no dependence; an asymptote
    only approached a million times the figure's own scale away)."""
    start = figures.get(name)
    x0 = float(start) if _is_number(start) else 0.0
    x1 = x0 * 1.5 if x0 else 1.0
    tolerance = 1e-9 + abs(target) * 1e-7
    reach = 1e6 * max(1.0, abs(x0))

    def miss(x: float) -> float | None:
        try:
            value = evaluate(expression, figures | {name: x})
        except (KeyError, ZeroDivisionError, OverflowError):  # a branch reading a figure not given; a pole
            return None
        return value - target if _is_number(value) else None

    f0, f1 = miss(x0), miss(x1)
    for _ in range(60):
        if f0 is None or f1 is None:
            return None
        if abs(f1) <= tolerance:
            return x1
        if f1 == f0:
            return None
        x0, x1, f0 = x1, x1 - f1 * (x1 - x0) / (f1 - f0), f1
        if not math.isfinite(x1) or abs(x1) > reach:
            return None
        f1 = miss(x1)
    return None


MAX_FORMULA_CHARS = 2000


def formula_names(path: Path, where: str, expression: str) -> set[str]:
    """The names a formula reads; a formula that is not one (syntax, a call other than min, max,
    abs, an attribute, a string) is an InputError naming where it is."""
    if len(expression) > MAX_FORMULA_CHARS:
        raise InputError(f"{path}: {where}: longer than {MAX_FORMULA_CHARS} characters; shorten it")
    try:
        tree = ast.parse(expression, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as err:
        reason = err.msg if isinstance(err, SyntaxError) else type(err).__name__
        raise InputError(f"{path}: {where}: not a formula ({reason}); see the header of decision_rules.toml") from None
    allowed = (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.Compare, ast.BinOp, ast.UnaryOp, ast.USub, ast.Name)
    allowed += (ast.Load, ast.Call, ast.Constant, *_COMPARE, *_ARITHMETIC)
    for node in ast.walk(tree):
        if not isinstance(node, allowed) or (isinstance(node, ast.Constant) and not _is_number(node.value)):
            shown = ast.get_source_segment(expression, node) or type(node).__name__
            raise InputError(
                f"{path}: {where}: '{shown}' is not allowed; a formula has names, numbers, + - * / **,"
                " comparisons, and/or, min/max/abs"
            )
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS):
            raise InputError(f"{path}: {where}: only min, max and abs may be called")
    return {
        n.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Name) and not any(isinstance(c, ast.Call) and c.func is n for c in ast.walk(tree))
    }


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def unknown_name(path: Path, where: str, name: str, known: set[str]) -> InputError:
    close = difflib.get_close_matches(name, sorted(known), n=1)
    hint = f"did you mean '{close[0]}'?" if close else "see decision_rules.toml's header for the names"
    return InputError(f"{path}: {where}: unknown name '{name}' ({hint}); a formula reads figures and [assumptions]")


def fmt_figure(value: float | None) -> str:
    if value is None:
        return "not measured"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.4g}"
    return str(int(value)) if isinstance(value, float) else str(value)


def fmt_ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.3f}"
