"""The code's shape: the engine imports and runs without the phases, no import cycles (function
level included), no module over 400 lines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import ROOT

ENGINE_ALONE = """
import importlib, pkgutil, sys
from pathlib import Path

class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("tasks", "orchestrate"):
            raise ImportError(f"the engine imported {name}")
        return None

sys.meta_path.insert(0, Blocked())
import orchestrator
for module in pkgutil.walk_packages(orchestrator.__path__, "orchestrator."):
    importlib.import_module(module.name)
from orchestrator.campaign import Campaign, TaskSpec
from orchestrator.runner import Runner
campaign = Campaign("alone", [TaskSpec("a", "first", "t", lambda ctx: {"n": 1}),
                              TaskSpec("b", "second", "t", lambda ctx: {"n": 2}, depends_on=("a",))])
state = Runner(campaign, Path(sys.argv[1]), log=lambda line: None).resume()
print(",".join(t.status.value for t in state.todos))
"""


def test_the_engine_imports_and_runs_without_the_phases(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", ENGINE_ALONE, str(tmp_path / "todo.json")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "completed,completed"


def test_no_import_cycles_and_no_module_over_400_lines() -> None:
    """Every import between our modules, function-level ones included, forms no cycle."""
    import ast

    modules = {}
    for package in ("orchestrate", "orchestrator", "tasks"):
        for path in (ROOT / package).rglob("*.py"):
            if "remote" in path.parts:
                continue  # shipped to the host, imports only torch, vllm and the stdlib
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
            assert len(path.read_text().splitlines()) <= 400, path
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                targets = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    assert not any(
        dep.startswith(("tasks", "orchestrate."))
        for name, deps in graph.items()
        if name.startswith("orchestrator")
        for dep in deps
    )
    state: dict[str, int] = {}

    def visit(name: str, trail: list[str]) -> None:
        state[name] = 1
        for dep in sorted(graph[name]):
            assert state.get(dep) != 1, "import cycle: " + " -> ".join(trail + [name, dep])
            if dep not in state:
                visit(dep, trail + [name])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [])


def test_the_typed_config_is_the_shape_of_the_assembled_one() -> None:
    """`Session.config`'s static type (tasks/config_types.py) against the model the units build:
    a section added, renamed or retyped in one and not the other fails here."""
    import typing

    from tasks.campaign_section import CampaignSection
    from tasks.config import config_model
    from tasks.config_types import CampaignConfig
    from tasks.registry import UNITS

    model = config_model(UNITS)
    hints = typing.get_type_hints(CampaignConfig)
    assert set(model.model_fields) == set(hints)
    for name, field in model.model_fields.items():
        if name != "campaign":
            assert field.annotation == hints[name], name
    assert issubclass(model.model_fields["campaign"].annotation, CampaignSection)  # [campaign] declared once
    assert set(model.model_fields["campaign"].annotation.model_fields) == set(CampaignSection.model_fields)


def test_every_config_field_is_an_input_of_a_task_or_marked_as_none() -> None:
    """Staleness is declared where the data is: a field that changes no result carries
    NOT_AN_INPUT (tasks/models.py); every other field is in the recorded inputs of some todo, so a
    change to it re-runs what it affects. A new field is an input until someone marks it."""
    from pathlib import Path

    from tasks.config import config_model
    from tasks.models import input_tasks
    from tasks.plan import build_campaign
    from tasks.registry import UNITS
    from tasks.session import Session

    everything = {
        "macro": {
            "request_rates": [1.0],
            "slo_search": True,
            "slo_tpot_ms": 50.0,
            "trace": "tasks/macro/samples/azure_sample.csv",
            "shared_prefix_tokens": 8,
            "conversations": 2,
        }
    }
    config = config_model(UNITS).model_validate(everything)
    session = Session(
        config=config,
        state_path=Path("/nonexistent/todo.json"),
        reports_dir=Path("/nonexistent"),
        host_factory=lambda: None,
    )
    specs = build_campaign(session, UNITS).tasks
    recorded: dict[str, set[str]] = {}
    for spec in specs:
        for section, values in (spec.inputs or {}).items():
            if isinstance(values, dict):
                recorded.setdefault(section, set()).update(values)
    for section in ("host", "service", "macro", "profile", "gemm", "allreduce"):
        fields = type(getattr(config, section)).model_fields
        unrecorded = [
            name
            for name, info in fields.items()
            if name not in recorded.get(section, set()) and input_tasks(info, "any") != []
        ]
        assert unrecorded == [], (
            f"[{section}] fields no todo records as an input and none marks NOT_AN_INPUT: {unrecorded}"
        )


def test_layers_hold_and_the_decision_domain_has_one_home() -> None:
    """benchmarks/structure.py's layers (engine < helpers < units < decisions < synthesis,
    experiments < assembly < application): no import runs back up them but the one type-only
    import of the typed config; synthesis and experiments read tasks/decisions, never each other."""
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import structure

    found = structure.modules()
    edges = structure.edges(found)
    up = [
        (a, b)
        for a, b, _, type_only in edges
        if structure.layer(b) > structure.layer(a) and a.split(".")[:2] != b.split(".")[:2] and not type_only
    ]
    assert up == []
    pair = {"synthesis", "experiments"}
    assert [(a, b) for a, b, _, _ in edges if {a.split(".")[:2][-1], b.split(".")[:2][-1]} == pair] == []
    assert [(a, b) for a, b, _, _ in edges if a.startswith("tasks.decisions") and b.split(".")[1] in pair] == []
