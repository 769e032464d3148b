"""The `allreduce` phase's work: all-reduces across the TP ranks at the decode message sizes
plus a power-of-two sweep, and the per-decode-step prediction (all-reduces a step x latency)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path

from orchestrator.atomic import write_atomic
from orchestrator.campaign import TaskContext
from orchestrator.retry import crashed_rank_policy
from tasks.allreduce.across_nodes import run_across_nodes
from tasks.allreduce.results import AllreduceResult, AllreduceRow, AllreduceRun, Prediction
from tasks.collective_env import bench_env
from tasks.host.results import HOST_FACTS
from tasks.host_json import run_json_script
from tasks.model.results import MODEL_FACTS
from tasks.session import Session

ALLREDUCE_SCRIPT = Path(__file__).parent / "remote" / "allreduce_bench.py"
BF16_BYTES = 2


def message_sizes(hidden: int, decode_tokens: list[int], low: int, high: int) -> tuple[list[int], list[int]]:
    model = sorted({tokens * hidden * BF16_BYTES for tokens in decode_tokens})
    sweep, size = [], low
    while size <= high:
        sweep.append(size)
        size *= 2
    return model, sorted(set(model) | set(sweep))


def standalone(session: Session, ranks: int) -> list[str]:
    """torchrun on one host. --standalone: a rendezvous on a free port chosen at launch, so a
    retry never meets the ranks of a killed attempt on a fixed port."""
    return [session.python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks)]


def variant_tag(env: dict[str, str]) -> str:
    return "-".join(env.values()).lower() or "default"


def bench(
    session: Session,
    args: list[str],
    tp: int,
    env: dict[str, str],
    tag: str,
    progress: Callable[..., None],
    log: Callable[[str], None],
) -> dict:
    """One run of the bench at the server's layout: on the host (its sizes shown as they are
    timed), or across every node (detached on each: no progress lines). Either runs once more
    when a rank died from a signal."""
    for attempt in crashed_rank_policy(log):
        with attempt:
            if session.multi_node:
                return run_across_nodes(session, ALLREDUCE_SCRIPT, args, tp, env, timeout_s=1800, tag=tag)
            return run_json_script(
                session,
                ALLREDUCE_SCRIPT,
                args,
                timeout_s=1800,
                env=env,
                launcher=standalone(session, tp),
                progress=lambda label, *rest: progress(f"{label} ({tag})", *rest),
            )
    raise AssertionError("unreachable: the policy re-raises the last error")


def server_path(run: AllreduceRun) -> tuple[str, dict[int, AllreduceRow]]:
    """The rows that predict the server's all-reduce, and what they measured: the path the server
    takes. On CPU that is vLLM's shared-memory all-reduce where the host has it, not gloo; on
    CUDA the calls replayed from a CUDA graph, as vLLM replays its decode steps (no launch
    overhead a call), where they could be measured; else the eager loop."""
    if run.vllm_shm_rows:
        return "vLLM CPU shared-memory all-reduce (_C::shm_allreduce)", {r.bytes: r for r in run.vllm_shm_rows}
    if run.graph_rows:
        return (
            f"torch.distributed {run.backend}, captured in a CUDA graph and replayed",
            {r.bytes: r for r in run.graph_rows},
        )
    return f"torch.distributed {run.backend}", {r.bytes: r for r in run.rows}


def allreduce_action(session: Session):
    def run(ctx: TaskContext) -> AllreduceResult:
        shapes = ctx.input(MODEL_FACTS).require_shapes()
        host = ctx.input(HOST_FACTS)
        cfg = session.config.allreduce
        tp = session.config.service.tensor_parallel
        model_sizes, sizes = message_sizes(
            shapes.hidden_size, cfg.decode_tokens, cfg.sweep_min_bytes, cfg.sweep_max_bytes
        )
        variants: list[dict[str, str]] = [{}]
        if host.accelerator == "cuda" and cfg.nccl_variants:
            variants += [
                {"NCCL_ALGO": algo, "NCCL_PROTO": proto}
                for algo in ("Ring", "Tree")
                for proto in ("LL", "LL128", "Simple")
            ]
        runs: list[AllreduceRun] = []
        args = ["--sizes", ",".join(map(str, sizes)), "--iterations", str(cfg.iterations)]
        base_env = {"OMP_NUM_THREADS": "1", "ALLREDUCE_DEVICE": host.accelerator} | bench_env(
            host.accelerator, session.config.service.env
        )
        for env in variants:
            try:
                document = bench(session, args, tp, base_env | env, variant_tag(env), ctx.progress, ctx.log)
            except Exception as err:  # a forced NCCL variant may be invalid here
                if not env:
                    raise
                runs.append(AllreduceRun(env=env, error=str(err)[:300]))
                continue
            result = AllreduceRun.model_validate({**document, "env": env, "nodes": len(session.nodes)})
            runs.append(result)
            ctx.log(
                f"{result.backend} {shlex.join(f'{k}={v}' for k, v in env.items()) or 'default'}:"
                f" {len(result.rows)} sizes" + (f" across {len(session.nodes)} nodes" if session.multi_node else "")
            )
        intra_node = None
        if session.multi_node:
            # The same all-reduce with every rank on the head, beside the layout the server runs:
            # what crossing the network costs. GPUs: as many ranks as the head has (at least 2).
            width = tp if host.accelerator == "cpu" else min(tp, host.gpu_count)
            if width > 1:
                document = run_json_script(
                    session,
                    ALLREDUCE_SCRIPT,
                    args,
                    timeout_s=1800,
                    env=base_env,
                    launcher=standalone(session, width),
                    progress=ctx.progress,
                )
                intra_node = AllreduceRun.model_validate({**document, "env": {}, "nodes": 1})
                ctx.log(
                    f"{intra_node.backend} at {width} ranks within {session.nodes[0].label}:"
                    f" {len(intra_node.rows)} sizes"
                )
        default = runs[0]
        predicted_by, by_size = server_path(default)
        per_step = shapes.allreduces_per_step
        predictions = [
            Prediction(
                decode_tokens=tokens,
                bytes=size,
                latency_us=by_size[size].latency_us,
                allreduces_per_step=per_step,
                predicted_ms_per_step=per_step * by_size[size].latency_us / 1000,
            )
            for tokens, size in zip(sorted(cfg.decode_tokens), model_sizes, strict=False)
            if size in by_size
        ]
        artifact = ctx.artifacts_dir / "allreduce.json"
        write_atomic(artifact, json.dumps([r.model_dump(mode="json") for r in runs], indent=1).encode())
        return AllreduceResult(
            backend=default.backend or "?",
            world_size=default.world_size or tp,
            model_sizes_bytes=model_sizes,
            runs=runs,
            predictions=predictions,
            nodes=len(session.nodes),
            intra_node=intra_node,
            predicted_by=predicted_by,
            allreduces_per_step_source="2 per layer (attention o_proj, MLP/MoE down)"
            " + 1 (vocab-parallel embedding), from config.json",
            artifact=str(artifact),
        )

    return run
