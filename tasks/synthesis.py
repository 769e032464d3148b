"""The findings document's content: setup, results, breakdown, cross-checks, bottleneck,
decisions, baseline and how to reproduce. Every table names the artifact it came from.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from pathlib import Path
from typing import Any

from orchestrator.atomic import write_atomic
from orchestrator.report import md_table
from orchestrator.schema import TodoState
from tasks.decisions import decide
from tasks.metrics import DEFINITIONS
from tasks.session import Session


def _f(value: Any, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


class Doc:
    def __init__(self, state: TodoState, folder: Path) -> None:
        self.results = {t.id: (t.result or {}) for t in state.todos if t.status == "completed"}
        self.folder = folder

    def link(self, path: str | None, label: str = "artifact") -> str:
        if not path:
            return ""
        return f"[{label}]({os.path.relpath(path, self.folder)})"

    def get(self, task_id: str) -> dict[str, Any]:
        return self.results.get(task_id, {})


def synthesis_sections(session: Session, state: TodoState, folder: Path) -> list[str]:
    doc = Doc(state, folder)
    figures = key_figures(session, doc)
    plots = make_plots(doc, folder)
    sections = [
        summary_section(figures),
        setup_section(session, doc),
        macro_section(doc, plots),
        micro_section(doc),
        breakdown_section(doc, plots),
        crosscheck_section(doc, figures),
        bottleneck_section(figures),
        decision_section(figures),
        baseline_section(figures, folder),
        reproduce_section(session),
    ]
    return [s for s in sections if s]


def _rank0(doc: Doc) -> dict[str, Any] | None:
    ranks = doc.get("trace_analysis").get("ranks")
    return ranks[0] if ranks else None


def key_figures(session: Session, doc: Doc) -> dict[str, Any]:
    rank0 = _rank0(doc)
    figures: dict[str, Any] = {"tp": session.config.service.tensor_parallel}
    cats = rank0["categories"] if rank0 else {}
    for name in ("communication", "gemm", "attention", "moe"):
        short = "comm" if name == "communication" else name
        figures[f"{short}_share_pct"] = cats.get(name, {}).get("share_pct", 0.0) if rank0 else None
    derived = doc.get("gemm_bench").get("derived", {})
    figures["quantized"] = (1 if derived.get("weight_dtype") == "w4a16" else 0) if derived else None
    single = doc.get("macro_single").get("single_stream", {})
    figures["decode_tpot_ms"] = single.get("tpot_ms", {}).get("mean")
    figures["w4a16_vs_bf16_speedup"] = w4a16_speedup(doc.get("gemm_bench").get("rows", []))
    info = doc.get("gemm_bench").get("info")
    figures["cuda"] = (1 if info.get("device") == "cuda" else 0) if info else None
    figures["dominant_category"] = max(cats, key=lambda c: cats[c]["share_pct"]) if cats else None
    figures["rank0"] = rank0
    return figures


def w4a16_speedup(rows: list[dict[str, Any]]) -> float | None:
    by_shape: dict[tuple, dict[str, float]] = {}
    for row in rows:
        if "us" in row and row["m"] == 1:
            by_shape.setdefault((row["m"], row["k"], row["n"]), {})[row["dtype"]] = row["us"]
    ratios = [v["bf16"] / v["w4a16"] for v in by_shape.values() if "bf16" in v and "w4a16" in v]
    return statistics.median(ratios) if ratios else None


def tail_note(category: dict[str, Any]) -> str:
    """A sentence when the mean call is mostly tail: the typical call is far cheaper."""
    p50 = category.get("p50_us_per_call")
    if not p50 or category["mean_us_per_call"] < 3 * p50:
        return ""
    return (f" The typical call takes {p50:.1f} µs (p50): most of the mean is a tail of calls that"
            " waited (for a late rank, a descheduled thread, a queue), not the operation's own cost.")


def summary_section(figures: dict[str, Any]) -> str:
    rank0 = figures["rank0"]
    lines = ["## Summary\n"]
    if rank0 and figures["dominant_category"]:
        dominant = figures["dominant_category"]
        cat = rank0["categories"][dominant]
        comm = rank0["categories"].get("communication")
        lines.append(f"- Decode steps on rank 0 spend most device time in **{dominant}**:"
                     f" {cat['share_pct']:.1f}% of decode device time ({cat['calls_per_step']:.0f} calls"
                     f" a step, {cat['mean_us_per_call']:.1f} µs a call, {cat['ms_per_step']:.3f} ms a step)."
                     + tail_note(cat))
        if comm and dominant != "communication":
            lines.append(f"- Communication is {comm['share_pct']:.1f}% of decode device time:"
                         f" {comm['calls_per_step']:.0f} calls a step at {comm['mean_us_per_call']:.1f} µs."
                         + tail_note(comm))
    if figures.get("decode_tpot_ms"):
        lines.append(f"- Single-stream TPOT {figures['decode_tpot_ms']:.2f} ms"
                     f" ({1000 / figures['decode_tpot_ms']:.0f} tokens/s a stream).")
    return "\n".join(lines) + "\n" if len(lines) > 1 else ""


def setup_section(session: Session, doc: Doc) -> str:
    facts = doc.get("host_facts")
    model = doc.get("model_config")
    ready = doc.get("service_ready")
    cfg = session.config
    rows = [["host", f"{cfg.host.kind} ({cfg.host.alias or cfg.host.hostname or 'this machine'})"],
            ["kernel", facts.get("uname", "n/a")],
            ["accelerators", facts.get("nvidia-smi", "n/a").replace("\n", "; ")],
            ["python / torch / vLLM", f"{facts.get('python', '?')} / {facts.get('torch', '?')} / {facts.get('vllm', '?')}"],
            ["model", f"{model.get('model', 'n/a')} ({model.get('model_type', '?')}"
                      f"{', generated tiny random-weight model' if model.get('generated') else ''})"],
            ["tensor parallel", str(cfg.service.tensor_parallel)],
            ["server ready after", f"{_f(ready.get('ready_s'))} s" + (" (adopted)" if ready.get("adopted") else "")]]
    text = "## Setup\n\n" + md_table(["what", "value"], rows)
    topology = facts.get("topology")
    if topology and topology != "none":
        text += f"\nInterconnect (`nvidia-smi topo -m`):\n\n```\n{topology}\n```\n"
    cpu = facts.get("cpu")
    if cpu:
        text += f"\nCPU (`lscpu`):\n\n```\n{cpu}\n```\n"
    text += f"\nSources: {doc.link(facts.get('artifact'), 'host facts')}, {doc.link(model.get('config_artifact'), 'config.json')}"
    if ready.get("log"):
        text += f", server log on the host: `{ready['log']}`"
    return text + "\n"


def macro_section(doc: Doc, plots: dict[str, str]) -> str:
    single = doc.get("macro_single").get("single_stream")
    sweep = doc.get("macro_sweep").get("levels", [])
    if not single and not sweep:
        return ""
    text = "## Phase 1: serving benchmarks\n\n"
    meta = doc.get("macro_single") or doc.get("macro_sweep")
    text += (f"Random-token prompts of {meta.get('input_tokens')} tokens, {meta.get('output_tokens')}"
             " output tokens (`ignore_eos`), streamed `/v1/completions`, measured by a client running on"
             " the host next to the server. Definitions (vLLM's `vllm bench serve`):\n\n")
    text += "\n".join(f"- **{k}**: {v}" for k, v in DEFINITIONS.items()) + "\n\n"
    levels = ([single] if single else []) + sweep
    header = ["run", "c", "ok/failed", "req/s", "out tok/s", "TTFT p50", "TTFT p99", "TPOT mean",
              "TPOT p50", "TPOT p99", "ITL p50", "ITL p99", "E2E p50", "stalls", "source"]
    rows = []
    for index, level in enumerate(levels):
        label = "single stream" if single and index == 0 else "sweep"
        rows.append([label, level["concurrency"], f"{level['completed']}/{level['failed']}",
                     _f(level["request_throughput_per_s"]), _f(level["output_throughput_tok_per_s"], 1),
                     _f(level["ttft_ms"].get("p50")), _f(level["ttft_ms"].get("p99")),
                     _f(level["tpot_ms"].get("mean"), 3), _f(level["tpot_ms"].get("p50"), 3),
                     _f(level["tpot_ms"].get("p99"), 3), _f(level["itl_ms"].get("p50"), 3),
                     _f(level["itl_ms"].get("p99"), 3), _f(level["e2e_ms"].get("p50"), 1),
                     stall_cell(level.get("stalls")), doc.link(level.get("artifact"), "requests")])
    text += "Latencies in ms; stalls as count (largest, ms).\n\n" + md_table(header, rows)
    cross = []
    for index, level in enumerate(levels):
        for metric, entry in level.get("server", {}).items():
            client = level[metric].get("mean")
            cross.append(["single" if single and index == 0 else f"c={level['concurrency']}", metric,
                          _f(client, 3), _f(entry["server_mean_ms"], 3),
                          _f(entry.get("client_minus_server_pct")) + "%"])
    apart = [("single stream" if single and index == 0 else f"c={level['concurrency']}")
             for index, level in enumerate(levels)
             if (sched := level.get("scheduling") or {}).get("autogroup_enabled")
             and sched.get("server_sid") is not None and sched["server_sid"] != sched.get("client_sid")]
    if apart:
        text += ("\n**The load client ran in another session than the server** (" + ", ".join(apart)
                 + ") while the kernel groups"
                 " scheduling by session (`sched_autogroup_enabled` = 1). On a busy host that was measured"
                 " delivering streams in bursts (see the stalls column); a campaign that launches the"
                 " server itself runs both in one session.\n")
    if cross:
        text += ("\nCross-check against the server's own `/metrics` histograms (delta over each run,"
                 " mean = sum/count). The client times bytes at its socket; vLLM's histograms stop at"
                 " the engine, so where the stalls column above is not 0 the two views differ by"
                 " delivery delays in the API server or the host that the engine never sees (users do;"
                 " one between tokens inflates TPOT; one before the first token shows only in TTFT and"
                 " shortens TPOT, as the tokens behind it arrive in a burst). Where it is 0 and TTFT"
                 " agrees, TPOT should agree within a fraction of a percent:\n\n" + md_table(["run", "metric", "client mean ms", "server mean ms",
                                                        "client - server"], cross))
    for name in ("throughput", "latency"):
        if name in plots:
            text += f"\n![{name}]({plots[name]})\n"
    return text


def stall_cell(stalls: dict | None) -> str:
    if not stalls:
        return "-"
    return f"{stalls['count']} ({stalls['max_ms']:.0f})" if stalls["count"] else "0"


def micro_section(doc: Doc) -> str:
    gemm = doc.get("gemm_bench")
    allreduce = doc.get("allreduce_bench")
    if not gemm and not allreduce:
        return ""
    text = "## Phase 2: microbenchmarks at the model's sizes\n\n"
    if gemm:
        info = gemm["info"]
        text += (f"GEMMs per rank (TP={gemm['derived']['tensor_parallel']}, family"
                 f" {gemm['derived']['family']}, weights {gemm['derived']['weight_dtype']}) on"
                 f" {info['device_name']} (torch {info['torch']}). Bandwidth ceiling: a large"
                 f" device-to-device copy in the same run, **{gemm['copy_ceiling_gbps']:.1f} GB/s**"
                 " (read + write). Each kernel was checked against a bf16 reference first."
                 f" Source: {doc.link(gemm.get('artifact'))}.\n\n")
        rows = []
        for row in gemm["rows"]:
            if "us" not in row:
                rows.append([row["name"], row["m"], row["k"], row["n"], row["dtype"], "-", "-", "-", "-", "-",
                             row.get("skipped", "")])
                continue
            rows.append([row["name"], row["m"], row["k"], row["n"], row["dtype"], row.get("kernel", ""),
                         _f(row["us"], 1), _f(row["tflops"], 3), _f(row["gbps"], 1),
                         _f(row.get("pct_of_copy_ceiling"), 1), f"{row['relative_error_vs_bf16_reference']:.1e}"])
        text += md_table(["layer", "M", "K", "N", "dtype", "kernel", "µs", "TFLOP/s", "GB/s",
                          "% of copy", "rel. err / note"], rows)
    if allreduce:
        default = allreduce["runs"][0]
        text += (f"\nAll-reduce across {allreduce['world_size']} ranks ({allreduce['backend']},"
                 f" torch.distributed loop; busbw = algbw x 2(n-1)/n). Source: {doc.link(allreduce.get('artifact'))}.\n\n")
        text += md_table(["bytes", "latency µs", "algbw GB/s", "busbw GB/s"],
                         [[r["bytes"], _f(r["latency_us"], 1), _f(r["algbw_gbps"], 3), _f(r["busbw_gbps"], 3)]
                          for r in default["rows"]])
        if default.get("vllm_shm_rows"):
            gloo = {r["bytes"]: r["latency_us"] for r in default["rows"]}
            text += ("\nThe same sizes through vLLM's own CPU all-reduce (`_C::shm_allreduce`, shared memory,"
                     " set up as vLLM's CpuCommunicator does and checked for a correct sum), the path the"
                     " server takes:\n\n")
            text += md_table(["bytes", "latency µs", "busbw GB/s", "gloo / shm"],
                             [[r["bytes"], _f(r["latency_us"], 1), _f(r["busbw_gbps"], 3),
                               _f(gloo[r["bytes"]] / r["latency_us"], 1) + "x" if r["bytes"] in gloo else "-"]
                              for r in default["vllm_shm_rows"]])
        variants = [run for run in allreduce["runs"][1:]]
        if variants:
            rows = []
            for run in variants:
                label = " ".join(f"{k}={v}" for k, v in run["env"].items())
                if "error" in run:
                    rows.append([label, "failed: " + run["error"][:80], ""])
                    continue
                for size in allreduce["model_sizes_bytes"]:
                    match = next((r for r in run["rows"] if r["bytes"] == size), None)
                    if match:
                        rows.append([label, size, _f(match["latency_us"], 1)])
            text += "\nNCCL variants at the decode sizes:\n\n" + md_table(["variant", "bytes", "latency µs"], rows)
        if allreduce.get("predictions"):
            text += ("\nPredicted all-reduce time a decode step (" + allreduce["allreduces_per_step_source"]
                     + f"; latency from {allreduce.get('predicted_by', allreduce['backend'])}):\n\n" + md_table(["decode tokens", "bytes", "latency µs", "calls a step", "ms a step"],
                                          [[p["decode_tokens"], p["bytes"], _f(p["latency_us"], 1),
                                            p["allreduces_per_step"], _f(p["predicted_ms_per_step"], 3)]
                                           for p in allreduce["predictions"]]))
    return text


def breakdown_section(doc: Doc, plots: dict[str, str]) -> str:
    analysis = doc.get("trace_analysis")
    if not analysis:
        return ""
    capture = doc.get("profile_capture")
    text = ("## Decode-step breakdown (profiler traces)\n\n"
            f"{capture.get('requests')} requests of {capture.get('output_tokens')} output tokens captured with"
            f" torch.profiler through vLLM (`/stop_profile` took {_f(capture.get('stop_profile_s'), 1)} s)."
            " Decode steps are vLLM's step annotations with no prefill tokens. On GPU traces device work is"
            " every kernel/memcpy/memset; on CPU traces it is every CPU op matched by a rule in"
            " `tasks/trace_rules.toml` (outermost only). Share = category time / sum of device work."
            f" Source: {doc.link(analysis.get('artifact'))}.\n\n")
    for rank in analysis["ranks"]:
        text += (f"### Rank {rank['rank']} ({rank['kind']}): {rank['decode_steps']} decode steps\n\n"
                 f"Sum of device work {rank['device_ms_per_step']:.3f} ms a step; union of busy time"
                 f" {rank['busy_union_ms_per_step']:.3f} ms; wall step time {rank['wall_ms_per_step']:.3f} ms"
                 " (a sum above the union means overlap across streams; wall above the union is idle"
                 f" or unattributed host time). Trace: {doc.link(rank['trace'], Path(rank['trace']).name)}.\n\n")
        text += md_table(["category", "calls a step", "µs a call (mean)", "µs a call (p50)", "ms a step", "share %"],
                         [[c, _f(v["calls_per_step"], 1), _f(v["mean_us_per_call"], 1),
                           _f(v.get("p50_us_per_call"), 1), _f(v["ms_per_step"], 3), _f(v["share_pct"], 1)]
                          for c, v in rank["categories"].items()])
        text += ("\nTop kernels/ops (a mean far above the p50 is a heavy tail: calls that waited, e.g. a"
                 " collective for a late rank):\n\n") + md_table(
            ["name", "category", "calls a step", "µs a call (mean)", "µs a call (p50)", "ms a step"],
            [[k["name"][:90], k["category"], _f(k["calls_per_step"], 1), _f(k.get("mean_us_per_call"), 1),
              _f(k.get("p50_us_per_call"), 1), _f(k["ms_per_step"], 3)]
             for k in rank["top_kernels"][:10]])
        if rank["unmatched_names"]:
            text += "\nUnmatched names (counted as other; extend the rules): " + ", ".join(
                f"`{n[:60]}`" for n in rank["unmatched_names"][:10]) + "\n"
        text += "\n"
    imbalance = analysis["imbalance"]
    text += (f"Rank imbalance: device work a step from {imbalance['device_ms_per_step_min']:.3f} to"
             f" {imbalance['device_ms_per_step_max']:.3f} ms; communication share by rank "
             + ", ".join(f"{v:.1f}%" for v in imbalance["communication_share_pct_by_rank"])
             + " (a rank that waits longer inside the collective shows a larger share).\n")
    if "breakdown" in plots:
        text += f"\n![decode breakdown]({plots['breakdown']})\n"
    return text


def crosscheck_section(doc: Doc, figures: dict[str, Any]) -> str:
    rank0 = figures["rank0"]
    allreduce = doc.get("allreduce_bench")
    gemm = doc.get("gemm_bench")
    rows = []
    if rank0:
        by_name = rank0.get("communication_by_name_per_step", {})
        allreduce_calls = sum(v for k, v in by_name.items() if "gather" not in k.lower())
        predicted = (gemm.get("derived") or {}).get("allreduces_per_step")
        rows.append(["all-reduces a decode step", f"config: {predicted}", f"trace: {allreduce_calls:.1f}",
                     "match" if predicted is not None and abs(predicted - allreduce_calls) < 0.01 else
                     "differs: see the names " + ", ".join(f"{k} x{v:.1f}" for k, v in by_name.items())])
        comm = rank0["categories"].get("communication")
        if allreduce.get("predictions") and comm:
            first = allreduce["predictions"][0]
            reduce_ops = [k for k in rank0.get("top_kernels", []) if k["category"] == "communication"
                          and "gather" not in k["name"].lower()]
            traced_ms = sum(k["ms_per_step"] for k in reduce_ops) if reduce_ops else comm["ms_per_step"]
            traced_what = "all-reduce ops" if reduce_ops else "all communication"
            ratio = first["predicted_ms_per_step"] / traced_ms if traced_ms else None
            predicted_by = allreduce.get("predicted_by", allreduce["backend"])
            if "shm_allreduce" in predicted_by:
                note = ("; the micro figure is the op with both ranks arriving together, a traced op also"
                        " waits for the slower rank (see the rank imbalance), so micro/trace well below 1"
                        " means ranks arrive apart")
                typical = [k["p50_us_per_call"] for k in reduce_ops if "p50_us_per_call" in k]
                if typical:
                    note += (f" (the traced typical call, p50 {_f(max(typical), 1)} µs, against micro"
                             f" {_f(first['latency_us'], 1)} µs)")
            elif allreduce["backend"] == "gloo":
                note = ("; the server does not use gloo (vLLM CPU uses its own shared-memory all-reduce,"
                        " not available on this host), so the micro figure bounds a gloo-based setup only")
            else:
                note = ""
            rows.append(["all-reduce ms a step (1 token)",
                         f"micro ({predicted_by}): {_f(first['predicted_ms_per_step'], 3)}",
                         f"trace ({traced_what}): {_f(traced_ms, 3)}", f"micro/trace = {_f(ratio)}" + note])
        tpot = figures.get("decode_tpot_ms")
        if tpot:
            residual = tpot - rank0["wall_ms_per_step"]
            rows.append(["decode step vs TPOT", f"trace wall step: {_f(rank0['wall_ms_per_step'], 3)} ms",
                         f"single-stream TPOT: {_f(tpot, 3)} ms",
                         f"residual {residual:.3f} ms ({residual / tpot * 100:.0f}% of TPOT): scheduling,"
                         " API server, detokenization and streaming outside the engine step"])
    if not rows:
        return ""
    return "## Cross-checks\n\n" + md_table(["check", "expected", "measured", "verdict"], rows)


def bottleneck_section(figures: dict[str, Any]) -> str:
    rank0 = figures["rank0"]
    if not rank0 or not figures["dominant_category"]:
        return ""
    ranked = sorted(rank0["categories"].items(), key=lambda kv: -kv[1]["share_pct"])
    lines = ["## Bottleneck analysis\n",
             f"The dominant category of decode device time on rank 0 is **{ranked[0][0]}** at"
             f" {ranked[0][1]['share_pct']:.1f}% ({ranked[0][1]['ms_per_step']:.3f} ms a step of"
             f" {rank0['device_ms_per_step']:.3f} ms). Ranked:\n"]
    lines += [f"{i}. {name}: {v['share_pct']:.1f}% ({v['calls_per_step']:.0f} calls, {v['mean_us_per_call']:.1f} µs a call)"
              for i, (name, v) in enumerate(ranked, 1)]
    return "\n".join(lines) + "\n"


def decision_section(figures: dict[str, Any]) -> str:
    record = decide({k: v for k, v in figures.items() if k not in ("rank0", "dominant_category")})
    return ("## Decision record\n\nRules: `tasks/decision_rules.toml`. Options that compromise precision are"
            " rejected whatever they would buy.\n\n"
            + md_table(["option", "evidence", "decision", "reason"],
                       [[r["title"], r["evidence"] or "-", r["decision"], r["reason"]] for r in record]))


def baseline_section(figures: dict[str, Any], folder: Path) -> str:
    rank0 = figures["rank0"] or {}
    baseline = {
        "single_stream_tpot_ms": figures.get("decode_tpot_ms"),
        "decode_device_ms_per_step_rank0": rank0.get("device_ms_per_step"),
        "decode_wall_ms_per_step_rank0": rank0.get("wall_ms_per_step"),
        **{f"{k}": v for k, v in figures.items() if k.endswith("_share_pct")},
        "communication_calls_per_step_rank0": (rank0.get("categories", {}).get("communication") or {}).get("calls_per_step"),
    }
    write_atomic(folder / "baseline.json", json.dumps(baseline, indent=1).encode())
    return ("## Baseline\n\nWhat a later campaign compares against (also in [baseline.json](baseline.json)):\n\n"
            + md_table(["figure", "value"], [[k, _f(v, 3)] for k, v in baseline.items()]))


def reproduce_section(session: Session) -> str:
    return ("## How to reproduce\n\n```\n./dev orchestrate resume            # this campaign, from its todo file\n"
            "./dev orchestrate reset TASK        # redo one task and what depends on it\n"
            "./dev orchestrate report            # regenerate this document\n```\n\n"
            f"Config: `{session.config.campaign.name}` campaign; the full configuration as run:\n\n```json\n"
            + json.dumps(session.config.model_dump(mode="json"), indent=1) + "\n```\n")


def make_plots(doc: Doc, folder: Path) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots: dict[str, str] = {}
    folder.mkdir(parents=True, exist_ok=True)
    sweep = doc.get("macro_sweep").get("levels", [])
    if sweep:
        conc = [lv["concurrency"] for lv in sweep]
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot(conc, [lv["output_throughput_tok_per_s"] for lv in sweep], marker="o")
        ax.set(xscale="log", xlabel="concurrency", ylabel="output tokens/s", title="Throughput vs concurrency")
        fig.tight_layout()
        fig.savefig(folder / "throughput.png", dpi=100)
        plt.close(fig)
        plots["throughput"] = "throughput.png"
        fig, ax = plt.subplots(figsize=(6, 4))
        for metric in ("tpot_ms", "itl_ms"):
            for pct, style in (("p50", "-"), ("p99", "--")):
                ax.plot(conc, [lv[metric].get(pct, math.nan) for lv in sweep], style, marker="o",
                        label=f"{metric[:-3].upper()} {pct}")
        ax.set(xscale="log", xlabel="concurrency", ylabel="ms", title="Latency percentiles")
        ax.legend()
        fig.tight_layout()
        fig.savefig(folder / "latency.png", dpi=100)
        plt.close(fig)
        plots["latency"] = "latency.png"
    analysis = doc.get("trace_analysis")
    if analysis:
        fig, ax = plt.subplots(figsize=(7, 1.2 + 0.6 * len(analysis["ranks"])))
        for index, rank in enumerate(analysis["ranks"]):
            left = 0.0
            for category, values in rank["categories"].items():
                ax.barh(index, values["ms_per_step"], left=left, label=category if index == 0 else None)
                left += values["ms_per_step"]
        ax.set(yticks=range(len(analysis["ranks"])), yticklabels=[f"rank {r['rank']}" for r in analysis["ranks"]],
               xlabel="ms a decode step", title="Decode-step device time by category")
        ax.legend(fontsize=7, ncol=4, loc="lower center", bbox_to_anchor=(0.5, 1.15))
        fig.tight_layout()
        fig.savefig(folder / "breakdown.png", dpi=100)
        plt.close(fig)
        plots["breakdown"] = "breakdown.png"
    return plots
