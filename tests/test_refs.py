"""Units read each other through typed handles (orchestrator/refs.py): a read a task did not
declare is a unit bug that names both tasks, the findings refuse a task no unit declares, and a
task id is spelled in one place, so renaming it there changes nothing else."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from pydantic import BaseModel

from orchestrator.campaign import Campaign, TaskContext, TaskSpec
from orchestrator.errors import UnitBug
from orchestrator.refs import TaskRef
from orchestrator.results import run_token
from orchestrator.runner import Runner
from orchestrator.schema import Status
from orchestrator.statefile import load_state
from tasks.host.results import HOST_FACTS, HostFacts
from tasks.registry import UNITS
from tasks.view import Findings


class Count(BaseModel):
    n: int


FIRST = TaskRef("first", Count)
SECOND = TaskRef("second", Count)


def test_reading_a_result_not_declared_is_a_unit_bug_naming_both_tasks(tmp_path: Path) -> None:
    def sneaky(ctx: TaskContext) -> Count:
        return Count(n=ctx.input(FIRST).n + 1)  # declares only `second`

    campaign = Campaign(
        "c",
        [
            TaskSpec(FIRST, "one", "t", lambda ctx: Count(n=1)),
            TaskSpec(SECOND, "two", "t", lambda ctx: Count(n=2), depends_on=(FIRST,)),
            TaskSpec(TaskRef("third", Count), "three", "t", sneaky, depends_on=(SECOND,)),
        ],
    )
    with pytest.raises(UnitBug) as caught:
        Runner(campaign, tmp_path / "todo.json", log=lambda _: None).resume()
    assert "'third'" in str(caught.value) and "'first'" in str(caught.value)
    assert UnitBug.exit_code == 70
    third = load_state(tmp_path / "todo.json").by_id()["third"]
    assert third.status == Status.failed and third.error.kind == "UnitBug"
    assert third.attempts == 0  # a bug is not the task's failure: retrying would change nothing


def test_a_declared_read_gets_the_typed_result_and_optional_reads_allow_absence(tmp_path: Path) -> None:
    seen: dict[str, object] = {}

    def reader(ctx: TaskContext) -> Count:
        seen["first"] = ctx.input(FIRST)
        seen["absent"] = ctx.optional_input(TaskRef("disabled_phase", Count))
        return Count(n=0)

    campaign = Campaign(
        "c",
        [
            TaskSpec(FIRST, "one", "t", lambda ctx: Count(n=1)),
            TaskSpec(SECOND, "two", "t", reader, depends_on=(FIRST,), optional=(TaskRef("disabled_phase", Count),)),
        ],
    )
    Runner(campaign, tmp_path / "todo.json", log=lambda _: None).resume()
    assert seen == {"first": Count(n=1), "absent": None}
    assert load_state(tmp_path / "todo.json").by_id()["second"].depends_on == ["first"]


def test_findings_refuse_an_unknown_task_and_give_none_for_a_disabled_one(tmp_path: Path) -> None:
    state = load_state(ROOT / "tests" / "data" / "default_campaign_todo.json")
    declared = frozenset(ref.id for unit in UNITS for ref in unit.results)
    findings = Findings(None, state, tmp_path, declared=declared)  # type: ignore[arg-type]
    assert isinstance(findings.result(HOST_FACTS), HostFacts)
    assert findings.result(TaskRef("macro_rates", Count)) is None  # declared, not run in that campaign
    with pytest.raises(UnitBug, match="'host_fact'"):
        findings.result(TaskRef("host_fact", HostFacts))  # a misspelt id no unit declares


def test_every_task_id_is_spelled_once_in_its_units_results_module() -> None:
    refs = {ref.id: ref for unit in UNITS for ref in unit.results}
    assert len(refs) == sum(len(unit.results) for unit in UNITS), "two units declare one id"
    sources = [path for folder in ("orchestrator", "tasks") for path in (ROOT / folder).rglob("*.py")]
    homes = {ref.id: unit.name for unit in UNITS for ref in unit.results}
    for task_id in refs:
        # The unit's results.py (a result model may live below it: the decision record's is the
        # decision domain's, tasks/decisions/record.py).
        home = ROOT / "tasks" / homes[task_id] / "results.py"
        literal = re.compile(rf"""["']{task_id}["']""")
        spelled = [path.relative_to(ROOT) for path in sources if literal.search(path.read_text())]
        assert spelled == [home.relative_to(ROOT)], f"{task_id}: spelled in {spelled}"


RENAME = """
import json, sys
sys.path.insert(0, "tests")
import orchestrator, tasks.host.results
assert tasks.host.results.__file__.startswith(sys.argv[1]), tasks.host.results.__file__
from pathlib import Path
from test_findings import assemble
print(json.dumps(assemble(Path(sys.argv[2]))))
"""


def _assembled(tree: Path, out: Path) -> str:
    out.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", RENAME, str(tree), str(out)],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tree)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.mark.heavy
def test_renaming_a_task_id_in_its_results_module_changes_nothing_else(tmp_path: Path) -> None:
    copy = tmp_path / "tree"
    for folder in ("orchestrate", "orchestrator", "tasks", "tests"):
        shutil.copytree(ROOT / folder, copy / folder, ignore=shutil.ignore_patterns("__pycache__"))
    results = copy / "tasks" / "host" / "results.py"
    results.write_text(results.read_text().replace('TaskRef("host_facts"', 'TaskRef("host_record"'))
    fixture = copy / "tests" / "data" / "default_campaign_todo.json"
    # The todo file of the same campaign run under the new name: ids, dependencies, and the
    # upstream run tokens (which hash each todo's own upstream) re-chained in file order.
    state = load_state(fixture)
    before = {todo.id: run_token(todo) for todo in state.todos}
    new_id = {"host_facts": "host_record"}
    done: dict[str, object] = {}
    for todo in state.todos:
        todo.id = new_id.get(todo.id, todo.id)
        todo.depends_on = [new_id.get(dep, dep) for dep in todo.depends_on]
        todo.upstream = {
            new_id.get(dep, dep): run_token(done[new_id.get(dep, dep)]) if value == before.get(dep) else value
            for dep, value in todo.upstream.items()
        }
        done[todo.id] = todo
    state = state.model_dump(mode="json")
    fixture.write_text(json.dumps(state))

    renamed = _assembled(copy, tmp_path / "renamed")
    original = _assembled(ROOT, tmp_path / "original")
    tasks_table = renamed.split("## Tasks")[1]
    assert "host_record" in tasks_table and "host_facts" in original.split("## Tasks")[1]
    # The same document above the task table: the setup (the host facts) did not vanish.
    assert renamed.split("## Tasks")[0] == original.split("## Tasks")[0]
    assert "| kernel | Linux " in renamed.split("## Setup")[1].split("\n## ")[0]  # from the host facts


@pytest.mark.parametrize("keep", [("host_facts",), ("host_facts", "model_facts")])
def test_compare_on_a_partial_todo_file_is_one_line_exit_2(tmp_path: Path, keep: tuple[str, ...]) -> None:
    from conftest import run_cli

    state = json.loads((ROOT / "tests" / "data" / "default_campaign_todo.json").read_text())
    for todo in state["todos"]:
        if todo["id"] not in keep:  # a campaign stopped early: the rest never ran
            todo.update(status="pending", result=None, finished_at=None)
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps(state))
    done = run_cli(
        ["compare", str(partial), str(ROOT / "tests" / "data" / "default_campaign_todo.json")], tmp_path, timeout=120
    )
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert str(partial) in line and "Traceback" not in done.stderr
    assert ("todo 'model_facts'" in line) == ("model_facts" not in keep)
