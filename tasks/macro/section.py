"""The `macro` phase's part of the findings: the serving table, the /metrics cross-check, plots."""

from __future__ import annotations

from orchestrator.report import md_table
from tasks.macro.metrics import DEFINITIONS
from tasks.macro.results import LevelSummary, MacroSingle, MacroSweep, Stalls
from tasks.view import Findings, fmt


def macro_section(findings: Findings) -> str:
    single = findings.result("macro_single", MacroSingle)
    sweep = findings.result("macro_sweep", MacroSweep)
    if not single and not sweep:
        return ""
    meta = single or sweep
    text = "## Phase 1: serving benchmarks\n\n"
    text += (f"Random-token prompts of {meta.input_tokens} tokens, {meta.output_tokens}"
             " output tokens (`ignore_eos`), streamed `/v1/completions`, measured by a client running on"
             " the host next to the server. Definitions (vLLM's `vllm bench serve`):\n\n")
    text += "\n".join(f"- **{k}**: {v}" for k, v in DEFINITIONS.items()) + "\n\n"
    runs: list[tuple[str, LevelSummary]] = [("single stream", single.single_stream)] if single else []
    runs += [(f"c={level.concurrency}", level) for level in (sweep.levels if sweep else [])]
    header = ["run", "c", "ok/failed", "req/s", "out tok/s", "TTFT p50", "TTFT p99", "TPOT mean",
              "TPOT p50", "TPOT p99", "ITL p50", "ITL p99", "E2E p50", "stalls", "source"]
    rows = [["single stream" if label == "single stream" else "sweep", level.concurrency,
             f"{level.completed}/{level.failed}", fmt(level.request_throughput_per_s),
             fmt(level.output_throughput_tok_per_s, 1), fmt(level.ttft_ms.p50), fmt(level.ttft_ms.p99),
             fmt(level.tpot_ms.mean, 3), fmt(level.tpot_ms.p50, 3), fmt(level.tpot_ms.p99, 3),
             fmt(level.itl_ms.p50, 3), fmt(level.itl_ms.p99, 3), fmt(level.e2e_ms.p50, 1),
             stall_cell(level.stalls), findings.link(level.artifact, "requests")]
            for label, level in runs]
    text += "Latencies in ms; stalls as count (largest, ms).\n\n" + md_table(header, rows)
    failing = [(label, level) for label, level in runs if level.failed]
    if failing:
        text += ("\n**Requests failed** while the server kept answering: " + "; ".join(
            f"{label}: {level.failed} of {level.requests} (first: `{(level.failure_examples or ['?'])[0][:120]}`)"
            for label, level in failing) + ". The figures of those runs describe the requests that"
            " succeeded only.\n")
    cross = [[label, metric, fmt(getattr(level, metric).mean, 3), fmt(entry.server_mean_ms, 3),
              fmt(entry.client_minus_server_pct) + "%"]
             for label, level in runs for metric, entry in level.server.items()]
    apart = [label for label, level in runs
             if (sched := level.scheduling) and sched.autogroup_enabled
             and sched.server_sid is not None and sched.server_sid != sched.client_sid]
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
                 " agrees, TPOT should agree within a fraction of a percent:\n\n"
                 + md_table(["run", "metric", "client mean ms", "server mean ms", "client - server"], cross))
    if sweep and sweep.levels:
        for name in plot_sweep(sweep.levels, findings):
            text += f"\n![{name}]({name}.png)\n"
    return text


def stall_cell(stalls: Stalls | None) -> str:
    if not stalls:
        return "-"
    return f"{stalls.count} ({stalls.max_ms:.0f})" if stalls.count else "0"


def plot_sweep(levels: list[LevelSummary], findings: Findings) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    conc = [level.concurrency for level in levels]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(conc, [level.output_throughput_tok_per_s or float("nan") for level in levels], marker="o")
    ax.set(xscale="log", xlabel="concurrency", ylabel="output tokens/s", title="Throughput vs concurrency")
    fig.tight_layout()
    fig.savefig(findings.folder / "throughput.png", dpi=100)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 4))
    for metric in ("tpot_ms", "itl_ms"):
        for pct, style in (("p50", "-"), ("p99", "--")):
            values = [getattr(getattr(level, metric), pct) for level in levels]
            ax.plot(conc, [float("nan") if v is None else v for v in values], style, marker="o",
                    label=f"{metric[:-3].upper()} {pct}")
    ax.set(xscale="log", xlabel="concurrency", ylabel="ms", title="Latency percentiles")
    ax.legend()
    fig.tight_layout()
    fig.savefig(findings.folder / "latency.png", dpi=100)
    plt.close(fig)
    return ["throughput", "latency"]
