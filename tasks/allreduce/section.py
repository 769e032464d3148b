"""The `allreduce` phase's part of the findings: latency by size, vLLM's own CPU path, NCCL
variants, and the decode-step prediction."""

from __future__ import annotations

from orchestrator.report import md_table
from tasks.allreduce.results import ALLREDUCE_BENCH, AllreduceResult, AllreduceRow
from tasks.view import Findings, fmt


def spread(row: AllreduceRow) -> str:
    return "n/a" if row.spread_pct is None else f"{row.spread_pct:.0f}% of {row.repeats}"


def allreduce_section(findings: Findings) -> str:
    allreduce = findings.result(ALLREDUCE_BENCH)
    if not allreduce:
        return ""
    default = allreduce.runs[0]
    spans = f" on {allreduce.nodes} nodes, laid out as the server's ranks" if allreduce.nodes > 1 else ""
    text = (
        "## Phase 2b: all-reduce microbenchmarks at decode sizes\n\n"
        f"All-reduce across {allreduce.world_size} ranks{spans} ({allreduce.backend}, torch.distributed"
        f" loop; busbw = algbw x 2(n-1)/n). Source: {findings.link(allreduce.artifact)}.\n\n"
    )
    text += md_table(
        ["bytes", "latency µs", "spread", "algbw GB/s", "busbw GB/s"],
        [[r.bytes, fmt(r.latency_us, 1), spread(r), fmt(r.algbw_gbps, 3), fmt(r.busbw_gbps, 3)] for r in default.rows],
    )
    text += (
        "\nLatency: the slowest rank's median over its timed loops; spread: (max - min) / median of"
        " that rank's loops.\n"
    )
    if default.collective_env:
        text += (
            "\nCommunication settings the ranks ran with (the server's `service.env` over our defaults): "
            + ", ".join(f"`{key}={value}`" for key, value in default.collective_env.items())
            + ".\n"
        )
    if default.graph_rows:
        eager = {r.bytes: r.latency_us for r in default.rows}
        text += (
            "\nThe same all-reduces captured in a CUDA graph and replayed, as vLLM runs its decode"
            " steps (no launch overhead a call):\n\n"
        )
        text += md_table(
            ["bytes", "latency µs", "spread", "busbw GB/s", "eager / graph"],
            [
                [
                    r.bytes,
                    fmt(r.latency_us, 1),
                    spread(r),
                    fmt(r.busbw_gbps, 3),
                    fmt(eager[r.bytes] / r.latency_us, 2) + "x" if r.bytes in eager else "-",
                ]
                for r in default.graph_rows
            ],
        )
    elif default.graph_unavailable:
        text += f"\nIn a CUDA graph: not measured ({default.graph_unavailable}).\n"
    if default.vllm_shm_rows:
        gloo = {r.bytes: r.latency_us for r in default.rows}
        text += (
            "\nThe same sizes through vLLM's own CPU all-reduce (`_C::shm_allreduce`, shared memory,"
            " set up as vLLM's CpuCommunicator does and checked for a correct sum), the path the"
            " server takes:\n\n"
        )
        text += md_table(
            ["bytes", "latency µs", "spread", "busbw GB/s", "gloo / shm"],
            [
                [
                    r.bytes,
                    fmt(r.latency_us, 1),
                    spread(r),
                    fmt(r.busbw_gbps, 3),
                    fmt(gloo[r.bytes] / r.latency_us, 1) + "x" if r.bytes in gloo else "-",
                ]
                for r in default.vllm_shm_rows
            ],
        )
    if default.vllm_shm_unavailable:
        text += f"\nvLLM's shared-memory all-reduce: not measured ({default.vllm_shm_unavailable}).\n"
    if allreduce.intra_node:
        text += across_vs_within(allreduce)
    if len(allreduce.runs) > 1:
        rows = []
        for run in allreduce.runs[1:]:
            label = " ".join(f"{k}={v}" for k, v in run.env.items())
            if run.error:
                rows.append([label, "failed: " + run.error[:80], ""])
                continue
            by_size = {r.bytes: r for r in run.rows}
            rows += [
                [label, size, fmt(by_size[size].latency_us, 1)]
                for size in allreduce.model_sizes_bytes
                if size in by_size
            ]
        text += "\nNCCL variants at the decode sizes:\n\n" + md_table(["variant", "bytes", "latency µs"], rows)
    if allreduce.predictions:
        text += (
            "\nPredicted all-reduce time a decode step ("
            + allreduce.allreduces_per_step_source
            + f"; latency from {allreduce.predicted_by}):\n\n"
            + md_table(
                ["decode tokens", "bytes", "latency µs", "calls a step", "ms a step"],
                [
                    [
                        p.decode_tokens,
                        p.bytes,
                        fmt(p.latency_us, 1),
                        p.allreduces_per_step,
                        fmt(p.predicted_ms_per_step, 3),
                    ]
                    for p in allreduce.predictions
                ],
            )
        )
    return text


def across_vs_within(allreduce: AllreduceResult) -> str:
    """The runs across the nodes beside the same all-reduce with every rank on the head."""
    within = allreduce.intra_node
    assert within is not None
    plain = {r.bytes: r for r in within.rows}
    shm = {r.bytes: r for r in within.vllm_shm_rows or []}
    rows = []
    for row in allreduce.runs[0].rows:
        inside = plain.get(row.bytes)
        rows.append(
            [
                row.bytes,
                fmt(row.latency_us, 1),
                fmt(inside.latency_us, 1) if inside else "-",
                fmt(shm[row.bytes].latency_us, 1) if row.bytes in shm else "-",
                fmt(row.latency_us / inside.latency_us, 1) + "x" if inside else "-",
            ]
        )
    headers = [
        "bytes",
        f"across {allreduce.nodes} nodes µs",
        f"within one node µs ({within.backend})",
        "within one node µs (vLLM shm)",
        "across / within",
    ]
    return (
        f"\nAcross nodes against within one node ({within.world_size} ranks on the head, same sizes and"
        " loop): what the network between the nodes costs each all-reduce of a decode step.\n\n"
        + md_table(headers, rows)
    )
