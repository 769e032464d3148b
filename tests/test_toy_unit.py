"""A new phase is one unit in one list: its config section, its todo, its typed result and its
findings section; a result of the wrong shape is refused by name."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrate.main import main
from orchestrator.campaign import TaskContext, TaskSpec
from orchestrator.refs import TaskRef
from orchestrator.statefile import load_state
from tasks.models import Result, Section
from tasks.registry import UNITS
from tasks.session import Session
from tasks.unit import PhaseUnit


class ToySection(Section):
    word: str = "hello"


class ToyResult(Result):
    greeting: str
    letters: int


TOY_HELLO = TaskRef("toy_hello", ToyResult)


def toy_specs(session: Session, enabled: frozenset[str]) -> list[TaskSpec]:
    def run(ctx: TaskContext) -> ToyResult:
        said = session.host().run(["echo", session.config.toy.word]).stdout.strip()  # a real command
        return ToyResult(greeting=said, letters=len(said))

    return [TaskSpec(TOY_HELLO, "Say the configured word", "toy", run, inputs={"toy": session.config.toy.model_dump()})]


def toy_section(findings) -> str:
    result = findings.result(TOY_HELLO)
    return f"## Toy phase\n\nThe host said **{result.greeting}** ({result.letters} letters).\n" if result else ""


TOY = PhaseUnit(name="toy", specs=toy_specs, results=(TOY_HELLO,), config=ToySection, section=toy_section)


def run_toy(folder: Path, units: list[PhaseUnit], word: str = "bonjour") -> int:
    config = folder / "campaign.toml"
    config.write_text(f'[campaign]\nname = "toy"\nphases = ["toy"]\n[toy]\nword = "{word}"\n')
    return main(
        [
            "--config",
            str(config),
            "--state",
            str(folder / "state" / "todo.json"),
            "--reports",
            str(folder / "reports"),
            "resume",
        ],
        units=units,
    )


def test_a_toy_unit_added_in_one_list_is_in_the_todo_file_and_the_findings(tmp_path: Path) -> None:
    assert run_toy(tmp_path, [*UNITS, TOY]) == 0
    todo = load_state(tmp_path / "state" / "todo.json").by_id()["toy_hello"]
    assert todo.status == "completed"
    assert todo.result == {"greeting": "bonjour", "letters": 7}
    assert todo.inputs == {"toy": {"word": "bonjour"}}
    findings = (tmp_path / "reports" / "toy" / "findings.md").read_text()
    assert "## Toy phase" in findings and "**bonjour** (7 letters)" in findings
    # Without the unit in the list, its config section and phase name are unknown keys.
    fresh = tmp_path / "without"
    fresh.mkdir()
    assert run_toy(fresh, UNITS) == 2


def test_a_result_of_the_wrong_shape_fails_the_task_and_a_bad_stored_result_is_named(tmp_path: Path) -> None:
    def bad_specs(session: Session, enabled: frozenset[str]) -> list[TaskSpec]:
        return [TaskSpec(TOY_HELLO, "Say it", "toy", lambda ctx: {"greeting": "hi"})]  # no letters

    broken = PhaseUnit(name="toy", specs=bad_specs, config=ToySection)
    assert run_toy(tmp_path, [*UNITS, broken]) == 1
    todo = load_state(tmp_path / "state" / "todo.json").by_id()["toy_hello"]
    assert todo.status == "failed" and "letters" in todo.error.message and todo.result is None
    # A completed result edited by hand (or by another version) is refused on read, by name.
    assert run_toy(tmp_path, [*UNITS, TOY]) == 0
    state_path = tmp_path / "state" / "todo.json"
    document = json.loads(state_path.read_text())
    document["todos"][0]["result"]["letters"] = "seven"
    state_path.write_text(json.dumps(document))
    before = state_path.read_text()
    assert run_toy(tmp_path, [*UNITS, TOY]) == 2
    assert state_path.read_text() == before
