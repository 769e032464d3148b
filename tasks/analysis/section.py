"""The `analysis` phase's part of the findings: the per-rank breakdown tables and plot."""

from __future__ import annotations

from pathlib import Path

from orchestrator.report import md_table
from tasks.analysis.results import ANALYSIS_BREAKDOWN, Breakdown, IdleBefore, RankBreakdown
from tasks.profile.results import PROFILE_CAPTURE
from tasks.view import Findings, fmt


def breakdown_section(findings: Findings) -> str:
    analysis = findings.result(ANALYSIS_BREAKDOWN)
    if not analysis:
        return ""
    capture = findings.result(PROFILE_CAPTURE)
    text = "## Decode-step breakdown (profiler traces)\n\n"
    if capture:
        text += (
            f"{capture.requests} requests of {capture.output_tokens} output tokens captured with"
            f" torch.profiler through vLLM (`/stop_profile` took {fmt(capture.stop_profile_s, 1)} s). "
        )
    text += (
        "Decode steps are vLLM's step annotations with no prefill tokens. On GPU traces device work is"
        " every kernel/memcpy/memset; on CPU traces it is every CPU op matched by a rule in"
        " `tasks/analysis/rules.toml` (outermost only). Share = category time / sum of device work;"
        " every category of the rules file is listed, so shares sum to 100."
        f" Source: {findings.link(analysis.artifact)}.\n\n"
    )
    if analysis.nodes:
        text += nodes_text(analysis)
    for rank in analysis.ranks:
        text += rank_section(rank, findings.link(rank.trace, Path(rank.trace).name))
    text += imbalance_text(analysis)
    text += (
        "\nTo look at a trace: open https://ui.perfetto.dev and drop the `.json.gz` file there (Perfetto"
        " reads Kineto traces gzipped, in the browser, nothing uploaded), or `chrome://tracing`.\n"
    )
    plot = findings.attach_figure("breakdown", breakdown_figure(analysis))
    text += f"\n![decode breakdown]({plot})\n"
    return text


def nodes_text(analysis: Breakdown) -> str:
    """Which ranks share a node: a collective between ranks of different nodes crosses the network."""
    groups = analysis.ranks_by_node()
    listed = "; ".join(
        f"{node}: rank{'s' * (len(ranks) > 1)} {', '.join(map(str, ranks))}" for node, ranks in groups.items()
    )
    shared = [node for node, ranks in groups.items() if len(ranks) > 1]
    return (
        f"**Ranks by node** ({len(groups)} nodes): {listed}. Every tensor-parallel all-reduce spans all"
        " ranks, so each one crosses the network between nodes"
        + (
            f"; ranks on one node ({', '.join(shared)}) share its memory and links"
            if shared
            else "; no two ranks share a node"
        )
        + ".\n\n"
    )


STEP_WORDS = {"decode": "decode steps", "prefill": "prefill steps", "mixed": "mixed steps", "step": "marked steps"}


def rank_section(rank: RankBreakdown, trace_link: str) -> str:
    """One rank's tables: the top-level steps by category, top kernels, work between steps,
    the other kinds of step, unmatched names."""
    text = f"### Rank {rank.rank} ({rank.kind}): {rank.decode_steps} {STEP_WORDS.get(rank.steps_kind, rank.steps_kind)}\n\n"
    if rank.note:
        text += f"**Note**: {rank.note}.\n\n"
    text += (
        f"Sum of device work {rank.device_ms_per_step:.3f} ms a step; union of busy time"
        f" {rank.busy_union_ms_per_step:.3f} ms; wall step time {rank.wall_ms_per_step:.3f} ms"
        " (a sum above the union means overlap across streams; wall above the union is idle"
        f" or unattributed host time). Trace: {trace_link}.\n\n"
    )
    text += "".join(f"{line}\n\n" for line in input_notes(_one_rank(rank)))
    text += md_table(
        ["category", "calls a step", "µs a call (mean)", "µs a call (p50)", "ms a step", "share %"],
        [
            [
                name,
                fmt(c.calls_per_step, 1),
                fmt(c.mean_us_per_call, 1),
                fmt(c.p50_us_per_call, 1),
                fmt(c.ms_per_step, 3),
                fmt(c.share_pct, 1),
            ]
            for name, c in rank.categories.items()
        ]
        + between_rows(rank),
    )
    text += (
        "\nTop kernels/ops (a mean far above the p50 is a heavy tail: calls that waited, e.g. a"
        " collective for a late rank):\n\n"
    ) + md_table(
        ["name", "category", "calls a step", "µs a call (mean)", "µs a call (p50)", "ms a step"],
        [
            [
                k.name[:90],
                k.category,
                fmt(k.calls_per_step, 1),
                fmt(k.mean_us_per_call, 1),
                fmt(k.p50_us_per_call, 1),
                fmt(k.ms_per_step, 3),
            ]
            for k in rank.top_kernels[:10]
        ],
    )
    if rank.between_steps and rank.between_steps.device_ms_per_step:
        between = rank.between_steps
        text += (
            f"\nBetween a decode step's annotation and the next step: {between.device_ms_per_step:.3f} ms"
            " of device work a step, not in the table above (vLLM 0.26 computes the logits and"
            " samples outside `execute_context_...`): "
            + ", ".join(
                f"{name} {figures.ms_per_step:.3f} ms ({figures.calls_per_step:.1f} calls)"
                for name, figures in between.categories.items()
            )
            + ".\n"
        )
    if rank.idle_before and rank.idle_before.idle_ms_per_step:
        text += idle_text(rank.idle_before)
    for name, other in rank.other_steps.items():
        text += (
            f"\n{name.capitalize()} steps: {other.steps}, {other.prefill_tokens_per_step:.0f} prefill"
            f" tokens a step, device work {other.device_ms_per_step:.3f} ms a step, wall"
            f" {other.wall_ms_per_step:.3f} ms:\n\n"
        )
        text += md_table(
            ["category", "calls a step", "ms a step", "share %"],
            [
                [c, fmt(v.calls_per_step, 1), fmt(v.ms_per_step, 3), fmt(v.share_pct, 1)]
                for c, v in other.categories.items()
                if v.calls_per_step
            ],
        )
    if rank.unmatched_names:
        text += (
            "\nUnmatched names (counted as other; extend the rules): "
            + ", ".join(f"`{n[:60]}`" for n in rank.unmatched_names[:10])
            + "\n"
        )
    text += "\n"
    return text


def idle_text(idle: IdleBefore) -> str:
    """Where the device waited inside a step: under CUDA graphs, each node's launch latency and
    the memsets and copies between kernels, which no kernel's duration holds."""
    return (
        f"\nDevice idle inside a step (between one kernel's end and the next one's start):"
        f" {idle.idle_ms_per_step:.3f} ms a step; waiting for "
        + ", ".join(
            f"`{k.name[:50]}` {k.ms_per_step:.3f} ms ({k.gaps_per_step:.1f} gaps of {k.mean_us_per_gap:.2f} µs)"
            for k in idle.top_kernels[:4]
        )
        + ".\n"
    )


def between_rows(rank: RankBreakdown) -> list[list[str]]:
    """The device work vLLM runs between two step annotations (a dense model's logits and
    sampling on vLLM 0.26) as its own row, and the step with it: a decode step's cost is like for
    like across models only with it (a MoE model's sampler runs inside the annotation)."""
    between = rank.between_steps
    if not between or not between.device_ms_per_step:
        return []
    calls = sum(figures.calls_per_step for figures in between.categories.values())
    total = rank.device_ms_per_step + between.device_ms_per_step
    return [
        [
            "**+ between steps** (outside the annotation)",
            fmt(calls, 1),
            "",
            "",
            fmt(between.device_ms_per_step, 3),
            f"+{between.device_ms_per_step / rank.device_ms_per_step * 100:.1f}" if rank.device_ms_per_step else "",
        ],
        ["**decode step with it**", "", "", "", fmt(total, 3), ""],
    ]


def input_notes(analysis: Breakdown, rules: str = "tasks/analysis/rules.toml") -> list[str]:
    """What the reader must know before trusting the table: kernels no rule covers (above 2% of
    device time), a training trace, steps attributed by launch, inputs that are not one run."""
    lines = [f"**Inputs**: {warning}." for warning in analysis.warnings]
    for rank in analysis.ranks:
        lines += [f"**Rank {rank.rank}: {warning}**." for warning in rank.warnings]
        if rank.device_outside_steps_pct and rank.device_outside_steps_pct >= 5:
            lines.append(
                f"Rank {rank.rank}: {rank.device_outside_steps_pct:.1f}% of the trace's device time is outside"
                " every step window (warm-up, the work between captures): not in the figures above."
            )
        for u in rank.uncategorised:
            lines.append(
                f"**Uncategorised: `{u.family}` is {u.share_pct:.1f}% of rank {rank.rank}'s device time**"
                f" ({u.names} name{'s' * (u.names > 1)}, e.g. `{u.example[:80]}`), counted as other:"
                f" add a [[rule]] for it to {rules}."
            )
        if rank.training:
            lines.append(
                f"**Training trace**: {rank.backward_share_pct:.0f}% of rank {rank.rank}'s device time is"
                " backward or optimizer kernels; the breakdown covers its marked steps, forward and"
                " backward, not inference decode steps."
            )
        if rank.attributed_by == "launch":
            lines.append(
                f"Rank {rank.rank}: steps are marked on the CPU only; each kernel is in the step whose"
                " CPU range launched it (correlation ids), and a step lasts until its last kernel ends."
            )
    return lines


def _one_rank(rank: RankBreakdown) -> Breakdown:
    return Breakdown.model_construct(ranks=[rank], warnings=[])


def imbalance_text(analysis: Breakdown) -> str:
    imbalance = analysis.imbalance
    return "".join(f"**Inputs**: {warning}.\n\n" for warning in analysis.warnings) + (
        f"Rank imbalance: device work a step from {imbalance.device_ms_per_step_min:.3f} to"
        f" {imbalance.device_ms_per_step_max:.3f} ms; communication share by rank "
        + ", ".join(f"{v:.1f}%" for v in imbalance.communication_share_pct_by_rank)
        + " (a rank that waits longer inside the collective shows a larger share).\n"
    )


def breakdown_figure(analysis: Breakdown):  # a matplotlib Figure
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 2.0 + 0.6 * len(analysis.ranks)))
    # One colour a category, fixed, so every rank's bar reads with the one legend.
    categories = list(dict.fromkeys(c for rank in analysis.ranks for c in rank.categories))
    palette = plt.get_cmap("tab20").colors
    colour = {category: palette[i % len(palette)] for i, category in enumerate(categories)}
    for index, rank in enumerate(analysis.ranks):
        left = 0.0
        for category, values in rank.categories.items():
            ax.barh(index, values.ms_per_step, left=left, color=colour[category])
            left += values.ms_per_step
    for category in categories:
        ax.barh(0, 0, color=colour[category], label=category)
    ax.set(
        yticks=range(len(analysis.ranks)),
        yticklabels=[f"rank {r.rank}" for r in analysis.ranks],
        xlabel="ms a decode step",
        title="Decode-step device time by category",
    )
    ax.legend(fontsize=7, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.45))
    return fig
