"""The code's shape, as numbers: import cycles, imports that run from a lower layer to a higher
one, modules over 400 lines, imports inside functions (each listed with its module), and imports
between tasks/synthesis and tasks/experiments (there must be none: both read tasks/decisions).

usage: python benchmarks/structure.py [--list]

Layers, bottom to top (a module may import its own layer and those below):
  0 orchestrator/                       the engine
  1 tasks/*.py helpers                  models, redaction, session, unit, view, host_json, ...
  2 tasks/<unit>/                       the phase units
  3 tasks/decisions/                    the decision domain
  4 tasks/synthesis/, tasks/experiments/
  5 tasks/findings.py, config.py, config_types.py, plan.py, registry.py
  6 orchestrate/                        the application
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
UNITS = {"host", "model", "service", "macro", "profile", "analysis", "gemm", "allreduce", "commands"}
TOP = {"tasks.findings", "tasks.config", "tasks.config_types", "tasks.plan", "tasks.registry"}


def layer(module: str) -> int:
    parts = module.split(".")
    if parts[0] == "orchestrator":
        return 0
    if parts[0] == "orchestrate":
        return 6
    if module in TOP:
        return 5
    if len(parts) > 1 and parts[1] in ("synthesis", "experiments"):
        return 4
    if len(parts) > 1 and parts[1] == "decisions":
        return 3
    if len(parts) > 1 and parts[1] in UNITS:
        return 2
    return 1


def modules() -> dict[str, Path]:
    found = {}
    for package in ("orchestrate", "orchestrator", "tasks"):
        for path in (ROOT / package).rglob("*.py"):
            if "remote" in path.parts:
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def edges(found: dict[str, Path]) -> list[tuple[str, str, bool, bool]]:
    """(importer, imported, inside a function, under TYPE_CHECKING) for every import of ours."""
    out = []
    for name, path in found.items():
        tree = ast.parse(path.read_text())
        in_function: set[int] = set()
        type_only: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                in_function |= {id(n) for n in ast.walk(node)}
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                type_only |= {id(n) for n in ast.walk(node)}
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets = [f"{node.module}.{alias.name}" for alias in node.names]
            for target in targets:
                while target and target not in found:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    out.append((name, target, id(node) in in_function, id(node) in type_only))
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found, state = [], {}

    def visit(name: str, trail: list[str]) -> None:
        state[name] = 1
        for dep in sorted(graph.get(name, ())):
            if state.get(dep) == 1:
                found.append(trail + [name, dep])
            elif dep not in state:
                visit(dep, trail + [name])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [])
    return found


def report(show: bool = False) -> dict[str, int]:
    found = modules()
    all_edges = edges(found)
    graph: dict[str, set[str]] = {}
    for a, b, _, _ in all_edges:
        graph.setdefault(a, set()).add(b)
    up = [(a, b, t) for a, b, _, t in all_edges if layer(b) > layer(a) and not b.startswith(a + ".")]
    # A package's __init__ importing its own modules is not a layer crossing; nor is a unit's module
    # importing its own package.
    up = [(a, b, t) for a, b, t in up if a.split(".")[:2] != b.split(".")[:2]]
    inside = [(a, b) for a, b, f, _ in all_edges if f]
    cross = [
        (a, b)
        for a, b, _, _ in all_edges
        if {a.split(".")[:2][-1], b.split(".")[:2][-1]} == {"synthesis", "experiments"}
    ]
    long = [str(p.relative_to(ROOT)) for p in found.values() if len(p.read_text().splitlines()) > 400]
    figures = {
        "modules": len(found),
        "import cycles": len(cycles(graph)),
        "imports running back up": len([u for u in up if not u[2]]),
        "of them type-only (TYPE_CHECKING)": 0,
        "type-only imports running back up": len([u for u in up if u[2]]),
        "imports inside functions": len(inside),
        "imports between synthesis and experiments": len(cross),
        "modules over 400 lines": len(long),
    }
    del figures["of them type-only (TYPE_CHECKING)"]
    for key, value in figures.items():
        print(f"{key}: {value}")
    if show:
        for cycle in cycles(graph):
            print("  cycle: " + " -> ".join(cycle))
        for a, b, t in up:
            print(f"  up: {a} -> {b}{' (type only)' if t else ''}")
        for a, b in cross:
            print(f"  cross: {a} -> {b}")
        for a, b in sorted(inside):
            print(f"  inside a function: {a} -> {b}")
        for path in long:
            print(f"  long: {path}")
    return figures


if __name__ == "__main__":
    report("--list" in sys.argv)
