"""The engine on quick real command tasks: ordering, failure, resume, reset, needs grouping."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import interruptible

from orchestrator.campaign import Campaign, TaskContext, TaskSpec, validate_graph
from orchestrator.errors import InputError, TaskFailed
from orchestrator.runner import Runner, reset
from orchestrator.schema import Status
from orchestrator.statefile import load_state


def spec(task_id: str, action, depends_on=(), needs=()) -> TaskSpec:
    return TaskSpec(
        task_id, content=f"do {task_id}", kind="test", action=action, depends_on=tuple(depends_on), needs=tuple(needs)
    )


def recorder(log: list[str], name: str, fail: bool = False):
    def action(ctx: TaskContext) -> dict:
        log.append(name)
        if fail:
            raise RuntimeError(f"{name} broke")
        return {"ran": name}

    return action


def test_cycle_is_reported_with_its_path() -> None:
    campaign = Campaign("c", [spec("a", None, ["c"]), spec("b", None, ["a"]), spec("c", None, ["b"])])
    with pytest.raises(InputError, match=r"cycle a -> c -> b -> a"):
        validate_graph(campaign)


def test_unknown_dependency_is_named() -> None:
    campaign = Campaign("c", [spec("a", None, ["nope"])])
    with pytest.raises(InputError, match="'a' depends on unknown task 'nope'"):
        validate_graph(campaign)


def test_dependencies_order_and_results_are_saved(tmp_path: Path) -> None:
    ran: list[str] = []
    campaign = Campaign("c", [spec("late", recorder(ran, "late"), ["early"]), spec("early", recorder(ran, "early"))])
    state = Runner(campaign, tmp_path / "todo.json", log=lambda _: None).resume()
    assert ran == ["early", "late"]
    saved = load_state(tmp_path / "todo.json")
    assert [t.status for t in saved.todos] == [Status.completed, Status.completed]
    assert saved.by_id()["late"].result == {"ran": "late"}
    assert state.by_id()["early"].finished_at <= state.by_id()["late"].started_at


def test_failure_stops_run_is_never_done_and_resume_retries(tmp_path: Path) -> None:
    ran: list[str] = []
    broken = {"yes": True}

    def flaky(ctx: TaskContext) -> dict:
        ran.append("flaky")
        if broken["yes"]:
            raise RuntimeError("disk full")
        return {}

    campaign = Campaign("c", [spec("flaky", flaky), spec("after", recorder(ran, "after"), ["flaky"])])
    path = tmp_path / "todo.json"
    with pytest.raises(TaskFailed, match="disk full"):
        Runner(campaign, path, log=lambda _: None).resume()
    saved = load_state(path).by_id()
    assert saved["flaky"].status == Status.failed
    assert saved["flaky"].error.message == "disk full"
    assert saved["after"].status == Status.pending
    broken["yes"] = False
    Runner(campaign, path, log=lambda _: None).resume()
    saved = load_state(path).by_id()
    assert saved["flaky"].status == Status.completed and saved["flaky"].attempts == 2
    assert saved["flaky"].error is None
    assert ran == ["flaky", "flaky", "after"]


def test_attempt_limit_gives_up_with_the_fix(tmp_path: Path) -> None:
    campaign = Campaign("c", [spec("bad", recorder([], "bad", fail=True))], max_attempts=2)
    path = tmp_path / "todo.json"
    for _ in range(2):
        with pytest.raises(TaskFailed):
            Runner(campaign, path, log=lambda _: None).resume()
    with pytest.raises(TaskFailed, match="gave up after 2 attempts.*orchestrate reset bad"):
        Runner(campaign, path, log=lambda _: None).resume()
    assert load_state(path).by_id()["bad"].attempts == 2


def test_reset_requeues_task_and_its_dependents_only(tmp_path: Path) -> None:
    ran: list[str] = []
    campaign = Campaign(
        "c",
        [
            spec("a", recorder(ran, "a")),
            spec("b", recorder(ran, "b"), ["a"]),
            spec("c", recorder(ran, "c"), ["b"]),
            spec("x", recorder(ran, "x")),
        ],
    )
    path = tmp_path / "todo.json"
    Runner(campaign, path, log=lambda _: None).resume()
    assert reset(campaign, path, "b") == ["b", "c"]
    ran.clear()
    Runner(campaign, path, log=lambda _: None).resume()
    assert ran == ["b", "c"]


class CountingNeed:
    """A resource that counts how often it is (re)acquired, like a model load."""

    def __init__(self, name: str, conflicts: set[str], loads: list[str]) -> None:
        self.name, self.conflicts, self.loads = name, frozenset(conflicts), loads

    def ensure(self, ctx: TaskContext) -> dict:
        if not self.loads or self.loads[-1] != self.name:
            self.loads.append(self.name)
        return {"held": self.name}

    def finish(self) -> None:
        return None


def test_tasks_sharing_a_need_run_together_so_the_service_loads_once(tmp_path: Path) -> None:
    loads: list[str] = []
    ran: list[str] = []
    needs = {"service": CountingNeed("service", {"free"}, loads), "free": CountingNeed("free", {"service"}, loads)}
    campaign = Campaign(
        "c",
        [
            spec("gemm", recorder(ran, "gemm"), needs=["free"]),
            spec("ready", recorder(ran, "ready"), needs=["service"]),
            spec("macro", recorder(ran, "macro"), ["ready"], needs=["service"]),
            spec("allreduce", recorder(ran, "allreduce"), needs=["free"]),
            spec("capture", recorder(ran, "capture"), ["macro"], needs=["service"]),
            spec("analysis", recorder(ran, "analysis"), ["capture"]),
        ],
        needs=needs,
    )
    Runner(campaign, tmp_path / "todo.json", log=lambda _: None).resume()
    assert loads.count("service") == 1, loads
    assert sorted(ran) == sorted(["gemm", "ready", "macro", "allreduce", "capture", "analysis"])


def test_a_detached_server_survives_ctrl_c_at_the_controllers_terminal(tmp_path: Path) -> None:
    """Ctrl-C at a terminal signals the whole foreground process group: the controller's, not
    the detached server's."""
    import signal
    import subprocess
    import sys

    from orchestrator.hosts.local import LocalHost

    controller = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from orchestrator.hosts.local import LocalHost;"
            f" print(LocalHost().start_detached(['sleep', '120'], '{tmp_path}/log', '{tmp_path}/pid'), flush=True);"
            " time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=interruptible,
    )
    pid = int(controller.stdout.readline())
    host = LocalHost()
    try:
        assert os.getpgid(pid) == pid != os.getpgid(controller.pid)
        os.killpg(controller.pid, signal.SIGINT)  # the terminal's Ctrl-C
        controller.wait(timeout=10)
        assert host.group_pids(pid) == [pid]
    finally:
        assert host.stop_group(pid, grace_s=5)


def test_progress_of_a_task_shows_as_throttled_plain_lines_off_a_terminal(tmp_path: Path) -> None:
    """Not a terminal (a log, CI): a step that has run `every_s` gets a line, then at most one
    every `every_s` and its last; a shorter step none. Lines carry the task's id, count, rate."""
    import io
    import time

    from orchestrator.progress import ProgressDisplay

    def steps(ctx: TaskContext) -> dict:
        for done in range(0, 41, 10):
            ctx.progress("c4_r1", done, 40, "requests", "12 output tok/s")
            time.sleep(0.2)
        ctx.progress("traces written", 3.5, None, "MB")
        return {}

    shown = io.StringIO()
    Runner(
        Campaign("c", [spec("sweep", steps)]),
        tmp_path / "todo.json",
        log=lambda _: None,
        progress=ProgressDisplay(shown, every_s=0.3),
    ).resume()
    lines = shown.getvalue().splitlines()  # updates at 0, 0.2, 0.4, 0.6, 0.8 s
    assert lines[0].startswith("[sweep] c4_r1: 20/40 requests, ") and lines[0].endswith("s left (12 output tok/s)")
    assert lines[1].startswith("[sweep] c4_r1: 40/40 requests, ") and " requests/s" in lines[1]
    assert float(lines[1].split(", ")[1].split()[0]) == pytest.approx(40 / 0.8, rel=0.3)
    assert len(lines) == 2  # the one-update step of "traces written" was too short for a line


@pytest.mark.heavy
def test_a_torchrun_whose_rank_died_from_a_signal_runs_once_more(tmp_path: Path) -> None:
    """An injected fault, under a real torchrun: rank 0 aborts (SIGABRT, as seen once in CI in
    the all-reduce bench) on the first run only; the policy runs it again, and says so. A rank
    that exits with a Python error is not retried."""
    import sys

    from orchestrator.errors import CommandFailed
    from orchestrator.hosts.local import LocalHost
    from orchestrator.retry import crashed_rank_policy

    script = tmp_path / "rank.py"
    script.write_text(
        "import os, pathlib, sys\n"
        "mark = pathlib.Path(sys.argv[1])\n"
        "if os.environ['RANK'] == '0':\n"
        "    if sys.argv[2] == 'error': raise SystemExit('a plain error')\n"
        "    if not mark.exists(): mark.write_text('1'); os.abort()\n"
        "    print('{\"ok\": 1}')\n"
    )
    said: list[str] = []

    def run(mode: str) -> str:
        launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
        for attempt in crashed_rank_policy(said.append):
            with attempt:
                return (
                    LocalHost()
                    .run([*launcher, str(script), str(tmp_path / f"mark-{mode}"), mode], timeout_s=120)
                    .stdout
                )
        raise AssertionError("unreachable")

    assert '{"ok": 1}' in run("abort-once")
    assert len(said) == 1 and "SIGABRT" in said[0]
    with pytest.raises(CommandFailed, match="exited 1"):
        run("error")
    assert len(said) == 1  # not retried


def test_a_hand_edit_during_a_run_is_kept_aside_and_named(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The fault: someone edits the todo file while the campaign holds it."""
    state_path = tmp_path / "todo.json"

    def edit_by_hand(ctx: TaskContext) -> dict:
        text = state_path.read_text()
        state_path.write_text(text.replace('"do b"', '"do b, edited"'))
        return {}

    campaign = Campaign("c", [spec("a", edit_by_hand), spec("b", recorder([], "b"), ["a"])])
    Runner(campaign, state_path, log=lambda _: None).resume()
    err = capsys.readouterr().err
    [kept] = list(tmp_path.glob("todo.json.edited-*"))
    assert f"{state_path} was changed on disk while this campaign held it" in err and str(kept) in err
    assert '"do b, edited"' in kept.read_text()  # the edit is not lost
    assert load_state(state_path).by_id()["b"].status == Status.completed
    # A run that edits nothing leaves nothing aside.
    Runner(Campaign("c", [spec("a", recorder([], "a")), spec("b", recorder([], "b"), ["a"])]), state_path).resume()
    assert len(list(tmp_path.glob("todo.json.edited-*"))) == 1
