"""The real `orchestrate` CLI in its own process: crash safety, the lock, bad input."""

from __future__ import annotations

import hashlib
import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import (
    interruptible,
    live_processes,
    run_cli,
    wait_for_processes,
    write_command_campaign,
)

from orchestrator.statefile import load_state


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.heavy
def test_sigkill_at_random_moments_never_corrupts_state_nor_reruns_completed(tmp_path: Path) -> None:
    # Each task appends its id to runs.log when it starts its real work, then sleeps a bit,
    # so kills land before, inside and after tasks, and during state writes.
    runs = tmp_path / "runs.log"
    commands = []
    for index in range(60):
        deps = [f"t{index - 1}"] if index else []
        commands.append((f"t{index}", f"echo t{index} >> {runs}; sleep 0.{random.randint(1, 3)}", deps))
    # Kills land inside the same task more than once: the attempt limit (3) is for real failures.
    write_command_campaign(tmp_path, commands, max_attempts=3)
    rng = random.Random(1234)
    kills = 0
    completed_before: list[tuple[set[str], int]] = []
    while kills < 25:
        process = subprocess.Popen(
            [sys.executable, "-m", "orchestrate", "resume"],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        time.sleep(rng.uniform(0.05, 0.9))
        if process.poll() is not None:
            assert process.returncode == 0, process.stderr.read()
            break
        process.send_signal(signal.SIGKILL)
        process.wait()
        kills += 1
        state = load_state(tmp_path / "state" / "todo.json")  # must always load
        if state is not None:
            done = {t.id for t in state.todos if t.status == "completed"}
            lines = runs.read_text().count("\n") if runs.exists() else 0
            completed_before.append((done, lines))
    final = run_cli(["resume"], tmp_path)
    assert final.returncode == 0, final.stderr
    state = load_state(tmp_path / "state" / "todo.json")
    assert all(t.status == "completed" for t in state.todos)
    assert kills >= 20, f"only {kills} kills landed; the campaign is too quick for this test"
    run_lines = runs.read_text().splitlines()
    for done, line_count in completed_before:
        rerun = done.intersection(run_lines[line_count:])
        assert not rerun, f"completed todos ran again after a kill: {rerun}"


def test_second_resume_on_the_same_state_is_refused_with_holder_pid(tmp_path: Path) -> None:
    write_command_campaign(tmp_path, [("slow", "sleep 5", [])])
    first = subprocess.Popen(
        [sys.executable, "-m", "orchestrate", "resume"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        lock = tmp_path / "state" / "todo.json.lock"
        for _ in range(100):
            if lock.exists() and lock.read_text().strip():
                break
            time.sleep(0.05)
        second = run_cli(["resume"], tmp_path)
        assert second.returncode == 3
        assert f"pid {first.pid}" in second.stderr
        assert "Traceback" not in second.stderr
    finally:
        first.kill()
        first.wait()


def test_corrupt_state_one_line_exit_2_file_unchanged(tmp_path: Path) -> None:
    write_command_campaign(tmp_path, [("a", "true", [])])
    state = tmp_path / "state" / "todo.json"
    state.parent.mkdir()
    state.write_text('{"schema_version": 1, "campaign": "quick", "todos": [{"id": ')
    before = _digest(state)
    for command in (["status"], ["resume"], ["reset", "a"]):
        result = run_cli(command, tmp_path)
        assert result.returncode == 2, result
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "todo.json" in result.stderr and "Traceback" not in result.stderr
        assert _digest(state) == before


def test_unknown_schema_version_and_bad_field_are_named(tmp_path: Path) -> None:
    state = tmp_path / "state" / "todo.json"
    state.parent.mkdir()
    state.write_text(json.dumps({"schema_version": 9, "campaign": "x", "todos": []}))
    result = run_cli(["status"], tmp_path)
    assert result.returncode == 2 and "schema_version" in result.stderr and "9" in result.stderr
    state.write_text(
        json.dumps(
            {
                "schema_version": 2,
                "campaign": "x",
                "todos": [{"id": "a", "content": "c", "kind": "k", "status": "done"}],
            }
        )
    )
    result = run_cli(["status"], tmp_path)
    assert result.returncode == 2 and "todos.0.status" in result.stderr
    # A file of the previous schema (untyped results): one line with the way out, file untouched.
    old = json.dumps({"schema_version": 1, "campaign": "x", "todos": []})
    state.write_text(old)
    result = run_cli(["status"], tmp_path)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "older orchestrate" in result.stderr and "init --force" in result.stderr
    assert state.read_text() == old


def test_bad_config_is_one_line_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "campaign.toml"
    cases = {
        '[campaign]\nname = "x"\ncolour = "red"\n': "campaign.colour': unknown key",
        "[campaign\n": "not valid TOML",
        "[service]\ntensor_parallel = 0\n": "service.tensor_parallel",
        '[host]\nkind = "ssh"\n': "host.alias",
    }
    for text, expected in cases.items():
        config.write_text(text)
        result = run_cli(["resume"], tmp_path)
        assert result.returncode == 2, (text, result.stderr)
        assert expected in result.stderr, (text, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1
        assert not (tmp_path / "state" / "todo.json").exists()


def test_cycle_in_config_prints_path(tmp_path: Path) -> None:
    write_command_campaign(tmp_path, [("a", "true", ["b"]), ("b", "true", ["a"])])
    result = run_cli(["resume"], tmp_path)
    assert result.returncode == 2 and "a -> b -> a" in result.stderr


def test_failed_command_keeps_output_tail_and_reset_then_resume(tmp_path: Path) -> None:
    flag = tmp_path / "fixed"
    write_command_campaign(
        tmp_path,
        [
            ("probe", f"echo checking; test -e {flag} || (echo no flag >&2; exit 7)", []),
            ("after", "echo after", ["probe"]),
        ],
    )
    result = run_cli(["resume"], tmp_path)
    assert result.returncode == 1 and "exited 7" in result.stderr
    todo = load_state(tmp_path / "state" / "todo.json").by_id()["probe"]
    assert todo.status == "failed" and "no flag" in todo.error.output_tail
    flag.touch()
    assert run_cli(["resume"], tmp_path).returncode == 0
    assert run_cli(["reset", "probe"], tmp_path).stdout.strip() == "re-queued: probe, after"
    status = run_cli(["status"], tmp_path)
    assert "pending" in status.stdout
    report = (tmp_path / "reports" / "quick" / "findings.md").read_text()
    assert "| probe | run probe | medium | completed | 2 |" in report


def test_human_notes_survive_regeneration(tmp_path: Path) -> None:
    write_command_campaign(tmp_path, [("a", "true", [])])
    assert run_cli(["resume"], tmp_path).returncode == 0
    document = tmp_path / "reports" / "quick" / "findings.md"
    text = document.read_text()
    mine = "We chose TP=8 because *reasons*.\n\n- keep this | pipe\n"
    head, _, _ = text.partition("## Human notes")
    document.write_text(head + "## Human notes\n\n" + mine)
    assert run_cli(["report"], tmp_path).returncode == 0
    assert document.read_text().endswith("## Human notes\n\n" + mine)


def test_schema_command_prints_json_schema(tmp_path: Path) -> None:
    result = run_cli(["schema"], tmp_path)
    schema = json.loads(result.stdout)
    assert set(schema["$defs"]["Todo"]["properties"]) >= {
        "content",
        "priority",
        "status",
        "depends_on",
        "attempts",
        "error",
        "result",
    }


def test_ctrl_c_saves_a_consistent_state_and_resume_goes_on(tmp_path: Path) -> None:
    write_command_campaign(
        tmp_path, [("first", "true", []), ("slow", "sleep 30", ["first"]), ("last", "true", ["slow"])]
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "orchestrate", "resume"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,
    )
    state_path = tmp_path / "state" / "todo.json"
    for _ in range(200):
        state = load_state(state_path) if state_path.exists() else None
        if state and state.by_id()["slow"].status == "in_progress":
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 130 and "Traceback" not in err
    todos = load_state(state_path).by_id()
    assert todos["first"].status == "completed"
    assert todos["slow"].status == "pending" and todos["slow"].started_at is None
    (tmp_path / "campaign.toml").write_text((tmp_path / "campaign.toml").read_text().replace("sleep 30", "true"))
    assert run_cli(["resume"], tmp_path).returncode == 0
    assert all(t.status == "completed" for t in load_state(state_path).todos)


@pytest.mark.heavy
def test_three_kills_inside_one_task_need_no_reset(tmp_path: Path) -> None:
    write_command_campaign(tmp_path, [("long", "sleep 3", []), ("after", "true", ["long"])], max_attempts=3)
    state_path = tmp_path / "state" / "todo.json"
    started = None
    for _ in range(3):
        process = subprocess.Popen(
            [sys.executable, "-m", "orchestrate", "resume"],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(400):  # this run's attempt is under way (not the last run's leftover)
            state = load_state(state_path) if state_path.exists() else None
            todo = state.by_id()["long"] if state else None
            if todo and todo.status == "in_progress" and todo.started_at != started:
                started = todo.started_at
                break
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.wait()
    final = run_cli(["resume"], tmp_path)
    assert final.returncode == 0, final.stderr
    assert final.stdout.count("cut short") == 1  # said once, when it was found
    long = load_state(state_path).by_id()["long"]
    assert long.status == "completed" and long.attempts == 1 and long.interruptions == 3


def test_a_killed_controller_leaves_no_command_children(tmp_path: Path) -> None:
    """SIGKILL while a task's command runs children (as torchrun runs its ranks): none outlive us."""
    marker = "3007.5"
    write_command_campaign(tmp_path, [("ranks", f"sleep {marker} & sleep {marker} & wait", [])])
    process = subprocess.Popen(
        [sys.executable, "-m", "orchestrate", "resume"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    assert len(wait_for_processes(f"sleep {marker}", 2)) == 2
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert wait_for_processes(f"sleep {marker}", 0, timeout_s=5) == []


def test_global_options_work_after_the_subcommand_and_version_is_printed(tmp_path: Path) -> None:
    """`orchestrate resume --config X --state Y` as users type it; options before the subcommand
    still work and are not reset by it; --version names the package's version."""
    (tmp_path / "cfg").mkdir()
    config = write_command_campaign(tmp_path / "cfg", [("only", "echo ran", [])], name="after")
    state = tmp_path / "elsewhere" / "todo.json"
    result = run_cli(
        ["resume", "--config", str(config), "--state", str(state), "--reports", str(tmp_path / "r")], tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert load_state(state).by_id()["only"].status == "completed"
    assert (tmp_path / "r" / "after" / "findings.md").is_file()
    assert not (tmp_path / "state").exists()  # nothing went to the default place
    before = run_cli(["--state", str(state), "status"], tmp_path)
    after = run_cli(["status", "--state", str(state)], tmp_path)
    assert before.returncode == after.returncode == 0 and "only" in before.stdout and before.stdout == after.stdout
    version = run_cli(["--version"], tmp_path)
    assert (
        version.returncode == 0 and version.stdout.startswith("orchestrate ") and version.stdout.split()[1][0].isdigit()
    )
    assert "--config" in run_cli(["resume", "--help"], tmp_path).stdout


@pytest.mark.heavy
def test_check_passes_on_the_default_and_names_each_problem_of_a_broken_config(tmp_path: Path) -> None:
    """`orchestrate check`: real host probe (this machine's python, torch, vLLM, disk, port).
    The embedded default passes (on a port the suite's own servers do not use); a missing
    model folder and a port held by something that is not vLLM are each one FAIL line, exit 2,
    in seconds, and nothing is written."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / "campaign.toml").write_text(f"[service]\nport = {port}\n")
    started = time.monotonic()
    good = run_cli(["check"], tmp_path / "ok", timeout=120)
    assert good.returncode == 0, good.stdout + good.stderr
    assert good.stdout.rstrip().endswith("ready") and "FAIL" not in good.stdout
    for what in ("host:", "torch:", "vllm:", "disk:", "model:", "service.port:"):
        assert f"ok    {what}" in good.stdout, what
    with socket.socket() as holder:  # a port taken by something that is not a vLLM server
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        (tmp_path / "bad").mkdir()
        (tmp_path / "bad" / "campaign.toml").write_text(
            f'[service]\nmodel = "{tmp_path}/no-such-model"\nport = {taken}\n'
        )
        bad = run_cli(["check"], tmp_path / "bad", timeout=120)
    assert bad.returncode == 2
    fails = [line for line in bad.stdout.splitlines() if line.startswith("FAIL")]
    assert len(fails) == 2 and "service.model" in fails[0] and "no-such-model" in fails[0]
    assert "service.port" in fails[1] and "not vLLM" in fails[1]
    assert time.monotonic() - started < 60
    assert sorted(p.name for p in (tmp_path / "bad").iterdir()) == ["campaign.toml"] and "Traceback" not in bad.stderr


@pytest.mark.heavy
def test_stop_leaves_no_process_of_ours_and_is_refused_while_a_campaign_runs(tmp_path: Path) -> None:
    """`orchestrate stop` after a controller died with the server up: the server's process group
    (here a stand-in for vLLM's tree: a leader that already exited and two workers it left, as
    when the API server dies first) is gone, nothing of ours remains; a second stop says there is
    nothing to stop. While an orchestrate holds the state, stop is refused (exit 3)."""
    from orchestrator.hosts.local import LocalHost
    from orchestrator.statefile import StateLock

    marker = "3009.5"
    (tmp_path / "campaign.toml").write_text("[service]\nport = 1\n")  # nothing listens on port 1
    pid_file = tmp_path / "state" / "host" / "service" / "vllm.pid"
    pid_file.parent.mkdir(parents=True)
    host = LocalHost()
    pid = host.start_detached(
        ["sh", "-c", f"sleep {marker} & sleep {marker} & exit 0"], str(tmp_path / "server.log"), str(pid_file)
    )

    def ours() -> list[str]:
        return live_processes(f"sleep {marker}")

    assert len(wait_for_processes(f"sleep {marker}", 2, timeout_s=5)) == 2
    with StateLock(tmp_path / "state" / "todo.json"):
        refused = run_cli(["stop"], tmp_path, timeout=60)
    assert refused.returncode == 3 and len(ours()) == 2
    stopped = run_cli(["stop"], tmp_path, timeout=60)
    assert stopped.returncode == 0, stopped.stderr
    assert f"stopped the server's process group {pid}" in stopped.stdout
    assert ours() == [] and host.group_pids(pid) == []
    again = run_cli(["stop"], tmp_path, timeout=60)
    assert again.returncode == 0 and "no server of this campaign runs" in again.stdout


def test_resume_runs_the_preflight_once_a_configuration_and_stops_before_anything_on_a_problem(tmp_path: Path) -> None:
    """The engine's pre-flight at `resume`: checks run, a pass is remembered per configuration
    (no second probe), a changed input checks again, a blocking problem stops it with every
    problem a line and nothing written, an unreachable host is exit 4 as from a task."""
    from orchestrator.campaign import Campaign, Check, TaskSpec
    from orchestrator.errors import HostError, InputError
    from orchestrator.preflight import CACHE_NAME, preflight_at_resume

    found: list[Check] = [Check("host", "reachable")]
    calls = []

    def preflight() -> list[Check]:
        calls.append(1)
        return list(found)

    def campaign(port: int) -> Campaign:
        return Campaign(
            name="c", tasks=[TaskSpec("t", "t", "command", lambda ctx: {}, inputs={"port": port})], preflight=preflight
        )

    state = tmp_path / "state" / "todo.json"
    lines: list[str] = []
    preflight_at_resume(campaign(1), state, lines.append)
    preflight_at_resume(campaign(1), state, lines.append)
    assert len(calls) == 1 and (state.parent / CACHE_NAME).is_file() and "1 checks passed" in lines[0]
    found[:] = [
        Check("model", "service.model: /x/config.json missing; set service.model", blocking=True),
        Check("service.port", "taken; choose another", blocking=True),
    ]
    with pytest.raises(InputError, match="2 problems would stop the campaign"):
        preflight_at_resume(campaign(2), state, lines.append)
    assert lines[-2:] == [
        "FAIL  model: service.model: /x/config.json missing; set service.model",
        "FAIL  service.port: taken; choose another",
    ]
    assert not state.exists()
    found[:] = [Check("host", "ssh gpu: connection refused", blocking=True, unreachable=True)]
    with pytest.raises(HostError, match="connection refused"):
        preflight_at_resume(campaign(3), state, lines.append)
    assert len(calls) == 3


def test_resume_with_a_missing_model_exits_2_in_seconds_naming_it(tmp_path: Path) -> None:
    (tmp_path / "campaign.toml").write_text(f'[service]\nmodel = "{tmp_path}/no-such-model"\n')
    started = time.monotonic()
    result = run_cli(["resume"], tmp_path, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "FAIL  service.model: " in result.stdout and "no-such-model" in result.stdout
    assert "pre-flight: 1 problem would stop the campaign" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "state" / "todo.json").exists() and time.monotonic() - started < 60


def test_the_readmes_exit_code_table_is_the_one_source() -> None:
    """orchestrator/errors.py's EXIT_CODES is where codes are defined; the README shows it, and
    every error class's code is one of them."""
    import re

    from conftest import ROOT

    import orchestrator.errors as errors

    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## Exit codes") :].split("\n\n")[1]
    rows = dict(re.findall(r"^\| (\d+) \| (.+) \|$", table, re.MULTILINE))
    assert {int(code): meaning for code, meaning in rows.items()} == errors.EXIT_CODES
    classes = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.OrchestrateError)]
    assert {c.exit_code for c in classes} <= set(errors.EXIT_CODES)
