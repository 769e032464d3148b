"""The `macro` phase's part of the findings: the serving table, the /metrics cross-check, plots."""

from __future__ import annotations

from orchestrator.report import md_table
from tasks.macro.energy_section import EnergyRun, energy_table
from tasks.macro.metrics import DEFINITIONS
from tasks.macro.noise import ranges_overlap
from tasks.macro.plots import plot_sweep
from tasks.macro.results import (
    MACRO_CONVERSATIONS,
    MACRO_RATES,
    MACRO_REPLAY,
    MACRO_SINGLE,
    MACRO_SLO_SEARCH,
    MACRO_SWEEP,
    LevelSummary,
    MacroSingle,
    MacroSweep,
)
from tasks.macro.tables import (
    conversations_table,
    goodput_table,
    noise_cell,
    percentiles_table,
    rates_table,
    replay_table,
    slo_search_table,
    stall_cell,
    write_csv,
)
from tasks.profile.results import PROFILE_CAPTURE
from tasks.view import Findings, fmt


def macro_section(findings: Findings) -> str:
    single = findings.result(MACRO_SINGLE)
    sweep = findings.result(MACRO_SWEEP)
    if not single and not sweep:
        return ""
    meta = single or sweep
    text = "## Phase 1: serving benchmarks\n\n"
    text += (
        f"{prompts_text(findings, meta.input_tokens, runs_of(single, sweep))}, {meta.output_tokens}"
        f" output tokens (`ignore_eos`), streamed `{endpoint_of(findings)}`, measured by a client running on"
        " the host next to the server. Definitions (vLLM's `vllm bench serve`):\n\n"
    )
    text += "\n".join(f"- **{k}**: {v}" for k, v in DEFINITIONS.items()) + "\n\n"
    runs: list[tuple[str, LevelSummary]] = [("single stream", single.single_stream)] if single else []
    runs += [(f"c={level.concurrency}", level) for level in (sweep.levels if sweep else [])]
    header = [
        "run",
        "c",
        "ok/failed",
        "req/s",
        "out tok/s",
        "TTFT p50",
        "TTFT p99",
        "TPOT mean",
        "TPOT p50",
        "TPOT p99",
        "ITL p50",
        "ITL p99",
        "E2E p50",
        "stalls",
        "TPOT run means: median [min-max], spread",
        "source",
    ]
    rows = [
        [
            "single stream" if label == "single stream" else "sweep",
            level.concurrency,
            f"{level.completed}/{level.failed}",
            fmt(level.request_throughput_per_s),
            fmt(level.output_throughput_tok_per_s, 1),
            fmt(level.ttft_ms.p50),
            fmt(level.ttft_ms.p99),
            fmt(level.tpot_ms.mean, 3),
            fmt(level.tpot_ms.p50, 3),
            fmt(level.tpot_ms.p99, 3),
            fmt(level.itl_ms.p50, 3),
            fmt(level.itl_ms.p99, 3),
            fmt(level.e2e_ms.p50, 1),
            stall_cell(level.stalls),
            noise_cell(level),
            findings.link(level.artifact, "requests"),
        ]
        for label, level in runs
    ]
    repeats = max((level.noise.tpot_ms_mean.runs for _, level in runs if level.noise), default=1)
    text += (
        f"Latencies in ms; stalls as count (largest, ms). Each row pools the requests of {repeats} runs"
        " (fresh prompts each); the spread column is over the runs' mean TPOT: stable <= 5%, noisy <= 20%,"
        " else unstable.\n\n" + md_table(header, rows)
    )
    text += noise_notes(runs)
    rates = findings.result(MACRO_RATES)
    text += rates_table(rates, findings) if rates else ""
    runs += [(f"{level.request_rate:g} req/s", level) for level in (rates.levels if rates else [])]
    text += goodput_table(runs, findings.session.config.macro if findings.session else None)
    text += percentiles_table(runs, findings.session.config.macro if findings.session else None)
    search = findings.result(MACRO_SLO_SEARCH)
    text += slo_search_table(search) if search else ""
    talks = findings.result(MACRO_CONVERSATIONS)
    if talks:
        text += conversations_table(talks)
        runs.append(("conversations", talks.level))
    replayed = findings.result(MACRO_REPLAY)
    if replayed:
        text += replay_table(replayed)
        runs.append(("replay", replayed.level))
    text += f"\nThe tables as CSV (unrounded): [serving.csv]({write_csv(runs, findings)}).\n"
    unique_prompts = [(label, level) for label, level in runs if label != "conversations"]  # they reuse history
    text += prefix_cache_text(
        unique_prompts, findings.session.config.macro.shared_prefix_tokens if findings.session else 0
    )
    text += energy_table(energy_runs(runs, findings), findings)
    failing = [(label, level) for label, level in runs if level.failed]
    if failing:
        text += (
            "\n**Requests failed** while the server kept answering: "
            + "; ".join(
                f"{label}: {level.failed} of {level.requests} (first: `{(level.failure_examples or ['?'])[0][:120]}`)"
                for label, level in failing
            )
            + ". The figures of those runs describe the requests that"
            " succeeded only.\n"
        )
    cross = [
        [
            label,
            metric,
            fmt(getattr(level, metric).mean, 3),
            fmt(entry.server_mean_ms, 3),
            fmt(entry.client_minus_server_pct) + "%",
        ]
        for label, level in runs
        for metric, entry in level.server.items()
    ]
    apart = [
        label
        for label, level in runs
        if (sched := level.scheduling)
        and sched.autogroup_enabled
        and sched.server_sid is not None
        and sched.server_sid != sched.client_sid
    ]
    if apart:
        text += (
            "\n**The load client ran in another session than the server** ("
            + ", ".join(apart)
            + ") while the kernel groups"
            " scheduling by session (`sched_autogroup_enabled` = 1). On a busy host that was measured"
            " delivering streams in bursts (see the stalls column); a campaign that launches the"
            " server itself runs both in one session.\n"
        )
    if cross:
        text += (
            "\nCross-check against the server's own `/metrics` histograms (delta over each run,"
            " mean = sum/count). The client times bytes at its socket; vLLM's histograms stop at"
            " the engine, so where the stalls column above is not 0 the two views differ by"
            " delivery delays in the API server or the host that the engine never sees (users do;"
            " one between tokens inflates TPOT; one before the first token shows only in TTFT and"
            " shortens TPOT, as the tokens behind it arrive in a burst). Where it is 0 and TTFT"
            " agrees, TPOT should agree within a fraction of a percent:\n\n"
            + md_table(["run", "metric", "client mean ms", "server mean ms", "client - server"], cross)
        )
    if sweep and sweep.levels:
        for name in plot_sweep(sweep.levels, findings):
            text += f"\n![{name}]({name}.png)\n"
    return text


def energy_runs(runs: list[tuple[str, LevelSummary]], findings: Findings) -> list[EnergyRun]:
    """Every measured run's telemetry, the profiled capture's last."""
    found = [
        EnergyRun(label, level.telemetry, level.completed, level.output_tokens, level.artifact) for label, level in runs
    ]
    capture = findings.result(PROFILE_CAPTURE)
    load = capture.load if capture else None
    if load is not None and load.telemetry is not None:
        found.append(
            EnergyRun("capture (profiled)", load.telemetry, load.requests - load.failed, load.output_tokens or 0)
        )
    return found


def runs_of(single: MacroSingle | None, sweep: MacroSweep | None) -> list[LevelSummary]:
    return ([single.single_stream] if single else []) + (sweep.levels if sweep else [])


def endpoint_of(findings: Findings) -> str:
    macro = findings.session.config.macro if findings.session else None
    return "/v1/chat/completions" if macro is not None and macro.endpoint == "chat" else "/v1/completions"


def prompts_text(findings: Findings, input_tokens: int, levels: list[LevelSummary]) -> str:
    """What the prompts were, and their length as the server counted it."""
    macro = findings.session.config.macro if findings.session else None
    dataset = macro.dataset if macro is not None else "random"
    counted = [level.prompt_tokens_mean for level in levels if level.prompt_tokens_mean is not None]
    measured = f" (the server counted {sum(counted) / len(counted):.1f} a request)" if counted else ""
    if dataset == "sharegpt":
        return (
            f"Prompts: the first turns of the conversations in `{macro.dataset_path}` (ShareGPT format), at most"
            f" {input_tokens} tokens{measured}; each request asks for its conversation's reply length in output"
            f" tokens, at most {macro.output_tokens} (`ignore_eos`)"
        )
    if dataset == "synthetic" or (macro is not None and macro.endpoint == "chat"):
        return f"Text prompts of {input_tokens} tokens (common words, cut with the model's tokenizer){measured}"
    return f"Random-token prompts of {input_tokens} tokens{measured}"


def prefix_cache_text(runs: list[tuple[str, LevelSummary]], shared_prefix_tokens: int = 0) -> str:
    """Every prompt starts with a unique id, so the prefix cache should serve nothing: the server's
    own counters say whether it did (a hit would flatter TTFT). With a shared system prompt, the
    hit rate of each level is the figure."""
    measured = [(label, level.prefix_cache_hit_pct) for label, level in runs if level.prefix_cache_hit_pct is not None]
    if shared_prefix_tokens and measured:
        return (
            f"\nPrefix cache: every prompt starts with the same {shared_prefix_tokens}-token system prompt, then its"
            " own unique id; the server's counters (`vllm:prefix_cache_hits` / `queries`, their difference over each"
            " level) give the share of prompt tokens served from the cache: "
            + ", ".join(f"{label} {pct:.1f}%" for label, pct in measured)
            + ".\n"
        )
    if not measured:
        return (
            "\nPrefix cache: the server exports no `vllm:prefix_cache_*` counters; prompts start with a unique"
            " id all the same.\n"
        )
    worst_label, worst = max(measured, key=lambda item: item[1])
    text = (
        f"\nPrefix cache: every prompt starts with a unique id, so no request can reuse"
        f" another's prompt; the server's counters (`vllm:prefix_cache_hits` / `queries`) give a hit rate"
        f" of at most {worst:.2f}% of prompt tokens ({worst_label}) over {len(measured)} runs."
    )
    if worst > 1:
        text += (
            " **Above 1%**: the server served prompt tokens from its cache (a warmup or another client"
            " sending the same prompts?); TTFT in those runs is flattered."
        )
    return text + "\n"


def noise_notes(runs: list[tuple[str, LevelSummary]]) -> str:
    """Outliers re-measured or flagged, and which differences between neighbouring rows are
    inside the noise (their runs' TPOT ranges overlap)."""
    lines = [f"- {label}: {note}" for label, level in runs if level.noise for note in level.noise.notes]
    differences = []
    for (label_a, a), (label_b, b) in zip(runs, runs[1:], strict=False):
        if not (a.noise and b.noise and a.tpot_ms.mean and b.tpot_ms.mean):
            continue
        overlap = ranges_overlap(a.noise.tpot_ms_mean, b.noise.tpot_ms_mean)
        if overlap is None:
            continue
        change = (b.tpot_ms.mean - a.tpot_ms.mean) / a.tpot_ms.mean * 100
        differences.append(
            f"{label_a} -> {label_b} {change:+.1f}% "
            + ("(inside the noise: the runs' ranges overlap)" if overlap else "(outside the noise)")
        )
    text = ""
    if lines:
        text += "\nRepeats re-measured:\n\n" + "\n".join(lines) + "\n"
    if differences:
        text += "\nMean TPOT from one row to the next: " + "; ".join(differences) + ".\n"
    return text
