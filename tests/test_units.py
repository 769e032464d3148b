"""Phase units: a new phase is one unit in one list; results are typed; a config change re-runs
exactly what it affects; the engine stands without the phases."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import ROOT, run_cli

from orchestrate.main import main
from orchestrator.campaign import TaskContext, TaskSpec
from orchestrator.refs import TaskRef
from orchestrator.statefile import load_state
from tasks.registry import UNITS
from tasks.session import Session
from tasks.unit import PhaseUnit, Result, Section


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

    return [TaskSpec(TOY_HELLO, "Say the configured word", "toy", run,
                     inputs={"toy": session.config.toy.model_dump()})]


def toy_section(findings) -> str:  # noqa: ANN001
    result = findings.result(TOY_HELLO)
    return f"## Toy phase\n\nThe host said **{result.greeting}** ({result.letters} letters).\n" if result else ""


TOY = PhaseUnit(name="toy", specs=toy_specs, results=(TOY_HELLO,), config=ToySection, section=toy_section)


def run_toy(folder: Path, units: list[PhaseUnit], word: str = "bonjour") -> int:
    config = folder / "campaign.toml"
    config.write_text(f'[campaign]\nname = "toy"\nphases = ["toy"]\n[toy]\nword = "{word}"\n')
    return main(["--config", str(config), "--state", str(folder / "state" / "todo.json"),
                 "--reports", str(folder / "reports"), "resume"], units=units)


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


TINY_CONFIG = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4,
               "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512}


def paced_campaign(tmp_path: Path, port: int):
    """A campaign of the serving phase against a fake server of known pace, adopted as the
    campaign's server: the serving phase is real but quick; host and model facts run for real."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(TINY_CONFIG))

    def write_config(output_tokens: int, macro_extra: str = "", campaign_extra: str = "") -> None:
        (tmp_path / "campaign.toml").write_text(textwrap.dedent(f"""\
            [campaign]
            name = "paced"
            phases = ["macro"]
            {campaign_extra}
            [service]
            model = "{model}"
            served_model_name = "pace"
            port = {port}
            [macro]
            output_tokens = {output_tokens}
            warmup_requests = 0
            single_stream_requests = 2
            concurrency_max = 2
            requests_per_level = 2
            """) + macro_extra)

    return write_config


def test_changing_macro_output_tokens_reruns_exactly_the_serving_todos(tmp_path: Path, pace_server) -> None:
    write_config = paced_campaign(tmp_path, pace_server(ttft_ms=5, pace_ms=2))
    write_config(8)
    first = run_cli(["resume"], tmp_path, timeout=300)
    assert first.returncode == 0, first.stderr
    before = load_state(tmp_path / "state" / "todo.json").by_id()
    assert set(before) == {"host_facts", "model_facts", "service_ready", "macro_single", "macro_sweep"}
    assert before["service_ready"].result["adopted"] is True
    write_config(12)
    second = run_cli(["resume"], tmp_path, timeout=300)
    assert second.returncode == 0, second.stderr
    assert ("[macro_single] runs again: config changed: macro.output_tokens (8 -> 12);"
            " so do its dependents macro_sweep") in second.stdout
    after = load_state(tmp_path / "state" / "todo.json").by_id()
    rerun = {todo_id for todo_id in after if after[todo_id].started_at != before[todo_id].started_at}
    assert rerun == {"macro_single", "macro_sweep"}
    assert after["macro_sweep"].result["output_tokens"] == 12
    assert after["macro_single"].result["single_stream"]["output_tokens"] == 3 * 2 * 12  # 3 runs pooled
    # Nothing changed since: nothing runs again.
    third = run_cli(["resume"], tmp_path, timeout=300)
    assert third.returncode == 0 and "runs again" not in third.stdout
    final = load_state(tmp_path / "state" / "todo.json").by_id()
    assert all(final[t].started_at == after[t].started_at for t in final)
    findings = (tmp_path / "reports" / "paced" / "findings.md").read_text()
    assert '"output_tokens": 12' in findings and "Stale results" not in findings


def _single_stream_noise(tmp_path: Path, port: int):
    paced_campaign(tmp_path, port)(8, "repeats = 3\noutlier_pct = 50\n")
    result = run_cli(["resume"], tmp_path, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    single = load_state(tmp_path / "state" / "todo.json").by_id()["macro_single"].result["single_stream"]
    return single, (tmp_path / "reports" / "paced" / "findings.md").read_text()


def test_a_slow_run_is_measured_again_and_left_out_when_the_rerun_agrees(tmp_path: Path, pace_server) -> None:
    """Injected fault: the fake server streams the single stream's second run (requests 3-4) at 3x
    its pace; the re-run (requests 7-8) is at the usual pace."""
    single, findings = _single_stream_noise(tmp_path, pace_server(ttft_ms=5, pace_ms=4, slow_requests="3-4"))
    noise = single["noise"]
    assert [run["tpot_ms_mean"] > 9 for run in noise["discarded"]] == [True]  # 3 x 4 ms, left out
    assert all(3.5 < run["tpot_ms_mean"] < 6 for run in noise["runs"])  # the three kept: the pace
    assert noise["notes"][0].startswith("run 2 (mean TPOT 12.") and "left out" in noise["notes"][0]
    assert 3.5 < single["tpot_ms"]["mean"] < 6 and single["completed"] == 6  # the pooled figures: kept runs only
    assert "outlier flagged" not in findings and "- single stream: run 2 (mean TPOT" in findings


def test_a_slow_run_that_persists_is_kept_and_flagged(tmp_path: Path, pace_server) -> None:
    """Injected fault: the second run and its re-run (requests 3-4 and 7-8) both at 3x the pace."""
    single, findings = _single_stream_noise(tmp_path, pace_server(ttft_ms=5, pace_ms=4, slow_requests="3-4,7-8"))
    noise = single["noise"]
    assert noise["discarded"] == [] and noise["notes"][0].startswith("flagged: run 2 stayed more than 50%")
    assert noise["tpot_ms_mean"]["verdict"] == "unstable" and noise["tpot_ms_mean"]["high"] > 9
    assert "; outlier flagged**" in findings


def _row_cells(output: str, figure: str) -> list[str]:
    line = next(line for line in output.splitlines() if line.startswith(f"| {figure} |"))
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _interval(cell: str) -> tuple[float, float, float]:
    value, low, high = re.match(r"([\d.]+) \[([\d.]+)-([\d.]+)\]", cell).groups()
    return float(value), float(low), float(high)


def test_compare_two_campaigns_judges_each_difference_against_both_noises(tmp_path: Path, pace_server) -> None:
    """Campaign A against a fake server at 4 ms a token; B with macro.output_tokens changed,
    first against the same pace, then against 8 ms a token (4 ms slower: outside any noise),
    with A as its configured baseline and the option it applied named. (With the pace the same,
    TPOT still moves: the first and last chunks' delivery delays are divided by tokens - 1.)"""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    paced_campaign(a, pace_server(ttft_ms=5, pace_ms=4))(8)
    assert run_cli(["resume"], a, timeout=300).returncode == 0
    itself = run_cli(["compare", str(a / "state" / "todo.json"), str(a / "state" / "todo.json")], tmp_path, timeout=120)
    assert itself.returncode == 0 and "**outside the noise**" not in itself.stdout
    assert _row_cells(itself.stdout, "single stream TPOT mean")[3] == "+0 ms"
    write_b = paced_campaign(b, pace_server(ttft_ms=5, pace_ms=4))
    write_b(12)
    assert run_cli(["resume"], b, timeout=300).returncode == 0
    same = run_cli(["compare", str(a / "state" / "todo.json"), str(b / "reports" / "paced")], tmp_path, timeout=120)
    assert same.returncode == 0, same.stderr
    cells = _row_cells(same.stdout, "single stream TPOT mean")
    (va, la, ha), (vb, lb, hb) = _interval(cells[1]), _interval(cells[2])
    apart = not (la <= vb <= ha) and not (lb <= va <= hb) and abs(vb - va) > max(ha - la, hb - lb)
    assert cells[5] == ("**outside the noise**" if apart else "inside the noise"), cells  # the rule, printed
    assert (tmp_path / "reports" / "compare_paced_vs_paced.md").read_text().startswith("# Comparison")

    slower = pace_server(ttft_ms=5, pace_ms=8)
    paced_campaign_port = f"port = {slower}"
    config = (b / "campaign.toml").read_text()
    (b / "campaign.toml").write_text(config.replace(config[config.index("port = "):].split("\n")[0], paced_campaign_port)
                                     .replace('phases = ["macro"]', f'phases = ["macro"]\nbaseline = "{a / "reports" / "paced"}"'
                                              '\napplied_option = "speculative_decoding"'))
    assert run_cli(["reset", "service_ready"], b, timeout=60).returncode == 0
    assert run_cli(["resume"], b, timeout=300).returncode == 0
    slow = run_cli(["compare", str(a / "reports" / "paced"), str(b / "state" / "todo.json"),
                    "--out", str(tmp_path / "c.md")], tmp_path, timeout=120)
    assert slow.returncode == 0, slow.stderr
    tpot_row = next(line for line in slow.stdout.splitlines() if line.startswith("| single stream TPOT mean |"))
    cells = [cell.strip() for cell in tpot_row.strip("|").split("|")]
    assert 3.5 < float(cells[3].split()[0]) < 4.5 and cells[5] == "**outside the noise**", tpot_row  # +4 ms
    findings = (b / "reports" / "paced" / "findings.md").read_text()
    assert "## Versus baseline" in findings and "B applied option `speculative_decoding`" in findings
    assert run_cli(["compare", str(a / "nothing"), str(b)], tmp_path, timeout=60).returncode == 2


def test_request_rates_are_sent_as_asked_and_goodput_matches_a_hand_count(tmp_path: Path, pace_server) -> None:
    """Open loop at 25 requests/s, bursty arrivals (gamma shape 0.5), against the fake server of
    known pace (4 ms a token); requests 90-99 are streamed at 3x the pace (an injected fault),
    so exactly those miss a TPOT SLO of 6 ms. Numbering: single stream 1-2, sweep warmup 3, c=1 4-43,
    c=2 44-83, the rate level's warmup 84, its 40 requests 85-124."""
    import urllib.request

    port = pace_server(ttft_ms=5, pace_ms=4, slow_requests="90-99")
    write_config = paced_campaign(tmp_path, port)
    write_config(8)
    config = (tmp_path / "campaign.toml").read_text().replace("requests_per_level = 2", "requests_per_level = 40")
    (tmp_path / "campaign.toml").write_text(config + "repeats = 1\nrequest_rates = [25.0]\nburstiness = 0.5\n"
                                            "slo_tpot_ms = 6.0\n")
    result = run_cli(["resume"], tmp_path, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    level = load_state(tmp_path / "state" / "todo.json").by_id()["macro_rates"].result["levels"][0]
    print(f"asked 25 req/s, sent {level['achieved_request_rate']:.2f} req/s over {level['duration_s']:.2f} s")
    assert level["request_rate"] == 25.0 and abs(level["achieved_request_rate"] - 25.0) / 25.0 < 0.05
    served = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=10).read())
    assert len(served) == 124 and sum(1 for r in served if r["tpot_s"] > 0.006) == 10  # the hand count
    findings = (tmp_path / "reports" / "paced" / "findings.md").read_text()
    expected_goodput = 30 / level["duration_s"]
    assert f"| 25 req/s | 30/40 | 75.0 | {expected_goodput:.2f} |" in findings
    assert "| c=1 | 40/40 | 100.0 |" in findings  # the sweep's requests all met it


def test_the_slo_search_finds_the_known_capacity_within_one_step(tmp_path: Path, pace_server) -> None:
    """The fake server streams one request at a time (PACE_CAPACITY=1; a server of known
    capacity): 5 ms to the first token + 7 x 4 ms = 33 ms a request as written, ~34 ms as the
    client sees one alone (the first point's E2E p50): ~29 requests a second. Below that, regular
    arrivals (burstiness 10000: gaps within 1%) never queue and TTFT stays ~5 ms; above it every
    request waits longer than the last, and TTFT passes the 15 ms SLO."""
    port = pace_server(ttft_ms=5, pace_ms=4, capacity=1)
    write_config = paced_campaign(tmp_path, port)
    write_config(8)
    config = (tmp_path / "campaign.toml").read_text().replace("requests_per_level = 2", "requests_per_level = 24")
    (tmp_path / "campaign.toml").write_text(config + "repeats = 1\nburstiness = 10000\nslo_ttft_ms = 15\n"
                                            "slo_met_pct = 90\nslo_search = true\nslo_search_runs = 6\n"
                                            "slo_search_start_rate = 4\n")
    result = run_cli(["resume"], tmp_path, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    search = load_state(tmp_path / "state" / "todo.json").by_id()["macro_slo_search"].result
    assert [p["rate"] for p in search["points"]][:4] == [4, 8, 16, 32]  # doubling until one misses
    capacity = 1000 / search["points"][0]["level"]["e2e_ms"]["p50"]  # one request at a time, alone
    low, high = search["best_rate"], search["next_missing_rate"]
    print(f"capacity {capacity:.1f} req/s; points " + ", ".join(
        f"{p['rate']:g} ({p['met_pct']:.0f}% met)" for p in search["points"]))
    assert low <= capacity * 1.03 and high >= capacity * 0.97 and high - low <= 8, (capacity, search)
    findings = (tmp_path / "reports" / "paced" / "findings.md").read_text()
    assert f"**{low:g} requests/s** is the highest rate that met them" in findings


def test_a_server_that_dies_mid_benchmark_fails_the_task(tmp_path: Path, pace_server) -> None:
    """The fake server exits after the single-stream requests (3 runs of 2; an injected fault): the
    sweep's requests fail, and the sweep must fail, not be recorded as a benchmark."""
    paced_campaign(tmp_path, pace_server(ttft_ms=5, pace_ms=2, die_after=6))(8)
    # No outlier re-run of a single-stream run: on a loaded machine one took requests 7-8 and the
    # server died inside the single stream instead (seen when this ran beside another suite).
    config = tmp_path / "campaign.toml"
    config.write_text(config.read_text() + "outlier_pct = 1000\n")
    result = run_cli(["resume"], tmp_path, timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr
    todos = load_state(tmp_path / "state" / "todo.json").by_id()
    assert todos["macro_single"].status == "completed", todos["macro_single"].error
    assert todos["macro_sweep"].status == "failed" and todos["macro_sweep"].result is None
    assert "stopped answering during the c=1 run (2 of 2 requests failed" in todos["macro_sweep"].error.message
    assert not (tmp_path / "reports" / "paced" / "findings.md").exists()


def test_failures_from_a_live_server_over_the_threshold_fail_the_level(tmp_path: Path, pace_server) -> None:
    """Every third request answered 500 (an injected fault) while the server stays up: the single
    stream's second run (requests 3 and 4) has one failed request of 2."""
    paced_campaign(tmp_path, pace_server(ttft_ms=5, pace_ms=2, fail_every=3))(8)
    result = run_cli(["resume"], tmp_path, timeout=300)
    assert result.returncode == 1
    single = load_state(tmp_path / "state" / "todo.json").by_id()["macro_single"]
    assert single.status == "failed" and single.result is None
    assert ("1 of 2 requests failed in the c=1 run (over macro.max_failed_pct = 1.0%) while the server"
            " answered") in single.error.message


def test_a_server_group_whose_leader_died_is_found_and_stopped(tmp_path: Path) -> None:
    """vLLM's API server (the group leader) dies; the engine and TP workers live on holding the
    accelerators. The lifecycle still owns the group and stops all of it."""
    import time

    from orchestrator.hosts.local import LocalHost
    from tasks.config import config_model
    from tasks.service.lifecycle import ServiceLifecycle

    config = config_model(UNITS).model_validate({"service": {"port": 1}})  # nothing listens on 1
    session = Session(config=config, state_path=tmp_path / "state" / "todo.json", reports_dir=tmp_path,
                      host_factory=LocalHost)
    lifecycle = ServiceLifecycle(session)
    host = session.host()
    pid = host.start_detached(["sh", "-c", "sleep 300 & sleep 300 & exit 0"], str(tmp_path / "log"),
                              lifecycle.pid_path)
    for _ in range(100):
        if not host.is_alive(pid):
            break
        time.sleep(0.05)
    orphans = host.group_pids(pid)
    assert not host.is_alive(pid) and len(orphans) == 2
    assert lifecycle.our_pid() == pid
    facts = lifecycle.ensure_stopped()
    assert facts["stopped_pid"] == pid and host.group_pids(pid) == []
    assert lifecycle.our_pid() is None


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
    out = subprocess.run([sys.executable, "-c", ENGINE_ALONE, str(tmp_path / "todo.json")], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "completed,completed"


def test_the_shipped_example_config_is_valid_and_fits_its_own_requests() -> None:
    from tasks.config import load_config

    config, _ = load_config(ROOT / "campaign.example.toml", UNITS)
    assert config.service.max_model_len >= config.macro.input_tokens + config.macro.output_tokens
    assert config.host.kind == "ssh" and config.commands[0].id == "topology"


def test_the_example_nodes_block_uncommented_makes_a_two_node_campaign(tmp_path: Path) -> None:
    """What a user writes for two GPU hosts: each node's launch has its rank, address and role."""
    import re

    from orchestrate.main import host_for
    from tasks.config import load_config
    from tasks.host.results import HostFacts, NodeFacts
    from tasks.service.launch import launch_plan
    from tasks.session import Session

    text = (ROOT / "campaign.example.toml").read_text()
    text = re.sub(r"^# (\[\[nodes\]\]|alias = \"gpu-|ip = |interface = |workdir = \"/scratch)", r"\1", text, flags=re.M)
    path = tmp_path / "campaign.toml"
    path.write_text(text)
    config, _ = load_config(path, UNITS)
    assert [node.alias for node in config.nodes] == ["gpu-a", "gpu-b"]
    session = Session(config=config, state_path=tmp_path / "state" / "todo.json", reports_dir=tmp_path,
                      host_factory=lambda: host_for(config), node_host_factory=lambda i: host_for(config, i))
    session.enabled = frozenset({"service", "profile"})
    assert session.multi_node and [n.workdir for n in session.nodes] == ["orchestrate-work", "/scratch/orchestrate"]
    node = NodeFacts(index=1, name="gpu-b", hostname="b", cpu_count=8, gpu_count=8, gpus=[], python="3", torch="2",
                     vllm="0.26")
    facts = HostFacts(uname="", cpu="", cpu_count=8, accelerator="cuda", accelerator_source="config", gpu_count=8,
                      gpus=[], driver=None, topology=None, python="3", torch="2", vllm="0.26", artifact="", nodes=[node])
    head, worker = (launch_plan(session, facts, n) for n in session.nodes)
    assert "--headless" not in head.argv and "--headless" in worker.argv
    assert worker.argv[worker.argv.index("--node-rank") + 1] == "1"
    assert worker.argv[worker.argv.index("--master-addr") + 1] == "10.0.0.11"
    assert head.env["VLLM_HOST_IP"] == "10.0.0.11" and worker.env["VLLM_HOST_IP"] == "10.0.0.12"
    assert worker.env["NCCL_SOCKET_IFNAME"] == "ens5" and worker.env["NCCL_NVLS_ENABLE"] == "0"
    assert worker.argv[worker.argv.index("--tensor-parallel-size") + 1] == "8"
    assert worker.argv[1] == "/scratch/orchestrate/scripts/vllm_cli.py"  # shipped by the launch, not by a plan


def test_env_setup_runs_before_every_host_command_and_its_failure_is_named(tmp_path: Path) -> None:
    """host.env_setup: a line a non-interactive SSH shell would otherwise never run (no rc file)."""
    from orchestrate.main import host_for
    from tasks.config import load_config

    path = tmp_path / "campaign.toml"
    path.write_text('[host]\nenv_setup = "export HF_HOME=/data/hf-cache; ORCH_UNEXPORTED=1"\n')
    config, _ = load_config(path, UNITS)
    host = host_for(config)
    assert host.run("echo $HF_HOME").stdout.strip() == "/data/hf-cache"
    assert host.run(["sh", "-c", "echo $HF_HOME"]).stdout.strip() == "/data/hf-cache"  # children inherit it
    host.env_setup = "false"
    broken = host.run("echo never", check=False)
    assert broken.exit_code == 97 and "host.env_setup failed: false" in broken.stderr and "never" not in broken.stdout


def test_a_gpu_server_starts_as_the_host_pythons_module_and_keeps_the_hosts_hub_settings(tmp_path: Path) -> None:
    from tasks.config import load_config
    from tasks.host.results import HostFacts
    from tasks.service.launch import launch_plan
    from tasks.session import Session

    path = tmp_path / "campaign.toml"
    path.write_text('[host]\npython = "/opt/venv/bin/python"\n[service]\nmodel = "/models/m"\n')
    config, _ = load_config(path, UNITS)
    session = Session(config=config, state_path=tmp_path / "todo.json", reports_dir=tmp_path, host_factory=lambda: None)
    facts = HostFacts(uname="", cpu="", cpu_count=8, accelerator="cuda", accelerator_source="config", gpu_count=8,
                      gpus=[], driver=None, topology=None, python="3", torch="2", vllm="0.26", artifact="")
    plan = launch_plan(session, facts)
    assert plan.argv[:5] == ["/opt/venv/bin/python", "-m", "vllm.entrypoints.cli.main", "serve", "/models/m"]
    assert "HF_HUB_OFFLINE" not in plan.env  # a configured model follows the host's own hub settings


def test_nvlink_multicast_is_off_for_every_server_on_a_cuda_host_unless_the_user_turns_it_on(tmp_path: Path) -> None:
    """NVLS on a host whose GPUs others share can take them out of service: off by default on
    CUDA (vLLM's own launch and a custom `service.command`), nothing added on CPU, and a user's
    `service.env` wins."""
    from tasks.collective_env import NVLINK_MULTICAST_OFF
    from tasks.config import load_config
    from tasks.host.results import HostFacts
    from tasks.service.launch import launch_plan
    from tasks.session import Session

    def plan_for(service: str, accelerator: str):  # noqa: ANN202
        path = tmp_path / "campaign.toml"
        path.write_text(f'[service]\nmodel = "/models/m"\n{service}')
        config, _ = load_config(path, UNITS)
        session = Session(config=config, state_path=tmp_path / "todo.json", reports_dir=tmp_path,
                          host_factory=lambda: None)
        facts = HostFacts(uname="", cpu="", cpu_count=8, accelerator=accelerator, accelerator_source="config",
                          gpu_count=8 if accelerator == "cuda" else 0, gpus=[], driver=None, topology=None,
                          python="3", torch="2", vllm="0.26", artifact="")
        return launch_plan(session, facts)

    assert plan_for("", "cuda").env.items() >= NVLINK_MULTICAST_OFF.items()
    assert plan_for('command = ["my-serve", "{model}"]\n', "cuda").env.items() >= NVLINK_MULTICAST_OFF.items()
    assert not set(plan_for("", "cpu").env) & set(NVLINK_MULTICAST_OFF)
    chosen = plan_for('env = { NCCL_NVLS_ENABLE = "1" }\n', "cuda").env
    assert chosen["NCCL_NVLS_ENABLE"] == "1" and chosen["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"


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
    assert not any(dep.startswith(("tasks", "orchestrate."))
                   for name, deps in graph.items() if name.startswith("orchestrator") for dep in deps)
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


def test_a_secret_in_service_env_is_in_no_written_file(tmp_path: Path) -> None:
    """The server's launch fails (an injected fault: its command exits at once), so the secret
    passes through the launch, the failure message and the log tail: it must land nowhere."""
    secret = "hf_topsecret_0123456789"
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(TINY_CONFIG))
    (tmp_path / "campaign.toml").write_text(textwrap.dedent(f"""\
        [campaign]
        name = "secret"
        phases = ["service"]
        [service]
        model = "{model}"
        port = 1
        command = ["sh", "-c", "echo starting with $HF_TOKEN set; exit 3"]
        env = {{ HF_TOKEN = "{secret}" }}
        """))
    result = run_cli(["resume"], tmp_path, timeout=120)
    assert result.returncode == 1
    todo = load_state(tmp_path / "state" / "todo.json").by_id()["service_ready"]
    assert todo.status == "failed" and "exited during start" in todo.error.message
    assert todo.inputs["service"]["env"]["HF_TOKEN"].startswith("sha256:")
    assert secret not in result.stdout + result.stderr
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.name != "campaign.toml"]
    leaked = [p for p in written if secret.encode() in p.read_bytes()]
    # The server's own log is the host's business (vLLM may print its environment); ours hold none.
    assert [p.name for p in leaked if p.name != "vllm.log"] == []


def test_with_several_nodes_gone_the_one_whose_server_died_first_is_named(tmp_path: Path) -> None:
    """Node 1's server is killed and the head's exits after it: both are gone by the next poll.
    The failure names node 1 (its log stopped first) with its own log, then the head. Both
    "nodes" are this machine (real pid files of exited processes, real logs with set times)."""
    import os

    from orchestrator.errors import TaskFailed
    from orchestrator.hosts.local import LocalHost
    from tasks.config import load_config
    from tasks.service.launch import service_log_path, service_pid_path
    from tasks.service.node_deaths import fail_if_node_died

    path = tmp_path / "campaign.toml"
    path.write_text(textwrap.dedent(f"""\
        [host]
        kind = "ssh"
        python = "{sys.executable}"
        [[nodes]]
        alias = "head"
        ip = "10.0.0.11"
        interface = "eth0"
        workdir = "{tmp_path / 'node0'}"
        [[nodes]]
        alias = "worker"
        ip = "10.0.0.12"
        interface = "eth0"
        workdir = "{tmp_path / 'node1'}"
        [service]
        model = "/models/m"
        tensor_parallel = 2
        """))
    config, _ = load_config(path, UNITS)
    session = Session(config=config, state_path=tmp_path / "todo.json", reports_dir=tmp_path,
                      host_factory=LocalHost, node_host_factory=lambda index: LocalHost())
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()  # a pid no process has now
    for node, (died_at, last_line) in zip(session.nodes, [(2000.0, "EngineDeadError: the engine died"),
                                                          (1000.0, "(Worker_TP1) decoding")], strict=True):
        for file, text in ((service_pid_path(session, node), gone), (service_log_path(session, node), last_line)):
            Path(file).parent.mkdir(parents=True, exist_ok=True)
            Path(file).write_text(text + "\n")
        os.utime(service_log_path(session, node), (died_at, died_at))
    try:
        fail_if_node_died(session, "during the c=1 run")
        raise AssertionError("no failure with both nodes gone")
    except TaskFailed as failed:
        assert str(failed).startswith("vLLM on node 1 (worker) exited during the c=1 run; then on node 0 (head)"), str(failed)
        assert "Worker_TP1" in failed.output_tail and "EngineDeadError" not in failed.output_tail
