"""The `gemm` phase's work: the GEMMs of one decode step per rank, timed with the accelerators
free, at the shapes the model facts derived (config.json, TP, quantization)."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.atomic import write_atomic
from orchestrator.campaign import TaskContext
from orchestrator.errors import TaskFailed
from tasks.gemm.results import GemmResult
from tasks.host.results import HOST_FACTS, HostFacts
from tasks.host_json import run_json_script
from tasks.macro.config import concurrency_levels
from tasks.macro.results import MACRO_SINGLE
from tasks.model.results import MODEL_FACTS
from tasks.model.shapes import ModelShapes, model_shapes
from tasks.service.config import ServiceSection
from tasks.service.launch import cores_per_rank
from tasks.service.results import SERVICE_READY
from tasks.session import Session

REMOTE = Path(__file__).parent / "remote"
GEMM_SCRIPT = REMOTE / "gemm_bench.py"
KV_SCRIPT = REMOTE / "kv_bench.py"
DRAFTER_SCRIPT = REMOTE / "ngram_gpu_bench.py"
DRAFTER_SETTINGS = {"min_n": 2, "max_n": 4, "k": 3}
"""The drafter `speculative_decoding_gpu` applies in the shipped rules (prompt_lookup_min/max,
num_speculative_tokens: tasks/decisions/decision_rules.toml; a unit does not read the decisions)."""
KV_BLOCK_SIZE = 16
"""vLLM's default KV-cache block size on CUDA (tokens a block)."""


def server_w4a16_kernel(ctx: TaskContext) -> str:
    """The W4A16 kernel the server's log named ('Using MacheteLinearKernel for ...'), so the bench
    times the same one; 'auto' (vLLM's own preference) when the server did not run or said none."""
    ready = ctx.optional_input(SERVICE_READY)
    if ready is None:
        return "auto"
    named = " ".join(ready.load.linear_kernels if ready.load else [])
    return next((kernel for kernel in ("machete", "marlin") if kernel in named.lower()), "auto")


def threads_per_rank(host: HostFacts, tensor_parallel: int) -> int:
    """On CPU each server rank has its share of the cores (VLLM_CPU_OMP_THREADS_BIND): the bench
    gets the same, or it would time a GEMM on more cores than the server gives one."""
    return cores_per_rank(host.cpu_count or 1, tensor_parallel)


HALF_TP = " (at TP/2)"
"""The name suffix of the rows timed at half the campaign's tensor parallelism (lower_tp's GEMMs)."""


def half_tp_rows(ctx: TaskContext, session: Session, host: HostFacts, batch_sizes: list[int]) -> list[dict]:
    """The step's GEMMs as one rank runs them at half the TP (each twice as wide), on CPU with the
    cores such a rank gets: what halving the TP does to GEMM time, measured before anything is
    relaunched (the `lower_tp` option reads it). No rows at TP 1 or an odd TP."""
    tp = session.config.service.tensor_parallel
    if tp < 2 or tp % 2:
        return []
    facts = ctx.input(MODEL_FACTS)
    config = json.loads(Path(facts.config_artifact).read_text())
    half = model_shapes(config, tp // 2)
    threads = {"threads": threads_per_rank(host, tp // 2)} if host.accelerator == "cpu" else {}
    return [{**row, **threads, "name": row["name"] + HALF_TP} for row in half.gemm_rows(batch_sizes)]


def gemm_action(session: Session):
    def run(ctx: TaskContext) -> GemmResult:
        shapes_model = ctx.input(MODEL_FACTS).require_shapes()
        host = ctx.input(HOST_FACTS)
        accelerator = host.accelerator
        cfg = session.config.gemm
        shapes = shapes_model.gemm_rows(cfg.batch_sizes)
        if cfg.compare_w4a16:
            shapes += [
                {**row, "dtype": "w4a16", "name": row["name"] + " (as W4A16)"}
                for row in shapes
                if row["dtype"] == "bf16"
            ]
        shapes += half_tp_rows(ctx, session, host, cfg.batch_sizes)
        local = ctx.artifacts_dir / "shapes.json"
        write_atomic(local, json.dumps(shapes).encode())
        remote = f"{session.workdir}/gemm/shapes.json"
        session.host().put(local, remote)
        extra = (
            ["--threads", str(threads_per_rank(host, session.config.service.tensor_parallel))]
            if accelerator == "cpu"
            else ["--w4a16-kernel", server_w4a16_kernel(ctx)]
        )
        fp8 = shapes_model.weight_dtype == "fp8"
        int4_group = None if fp8 else shapes_model.group_size
        fp8_block = (shapes_model.group_size or 0) if fp8 else 128
        measured = run_json_script(
            session,
            GEMM_SCRIPT,
            [
                remote,
                "--repeats",
                str(cfg.repeats),
                "--group-size",
                str(int4_group or cfg.int4_group_size),
                "--fp8-block",
                str(fp8_block),
                "--device",
                accelerator,
                *extra,
            ],
            timeout_s=3600,
            progress=ctx.progress,
        )
        measured.update(kv_micro(ctx, session, host, shapes_model))
        measured.update(drafter_micro(ctx, session, host))
        artifact = ctx.artifacts_dir / "gemm.json"
        write_atomic(artifact, json.dumps(measured, indent=1).encode())
        result = GemmResult.model_validate({**measured, "artifact": str(artifact)})
        timed = [row for row in result.rows if row.us is not None]
        ctx.log(
            f"{len(timed)} of {len(result.rows)} shapes timed on {result.info.device};"
            f" copy ceiling {result.copy_ceiling_gbps:.1f} GB/s"
        )
        return result

    return run


def kv_points(session: Session) -> list[dict[str, int]]:
    """Every concurrency the campaign serves (the sweep's levels and the capture's), each at the
    mean context of a decode step: the sweep's requests (prompt + half the output) and the
    capture's, where its output length differs."""
    macro, profile = session.config.macro, session.config.profile
    levels = sorted(set(concurrency_levels(macro.concurrency_max)) | {profile.concurrency})
    contexts = sorted({macro.input_tokens + macro.output_tokens // 2, macro.input_tokens + profile.output_tokens // 2})
    return [{"m": m, "context": context} for context in contexts for m in levels]


def served_max_model_len(service: ServiceSection) -> int:
    """The server's --max-model-len: the last one a custom command or the extra arguments name (vLLM
    takes the last), else the config's. vLLM sizes the Triton MLA decode's splits, captured in its CUDA
    graphs, from it."""
    args = list(service.command or []) + list(service.extra_args)
    named = [args[i + 1] for i, arg in enumerate(args[:-1]) if arg == "--max-model-len" and args[i + 1].isdigit()]
    return int(named[-1]) if named else service.max_model_len


def kv_micro(ctx: TaskContext, session: Session, host: HostFacts, shapes_model: ModelShapes) -> dict:
    """The FP8 KV-cache path against the model's own KV dtype, one attention layer's write and
    decode attention (kv_bench.py), before any experiment: the `fp8_kv_cache` option's input.
    Where it cannot run, the result says why and the option keeps its stated assumption."""
    if host.accelerator != "cuda":
        return {"kv_not_measured": "the FP8 KV micro times vLLM's CUDA kernels; vllm-cpu's attention is not reproduced"}
    if shapes_model.mla is not None:  # a latent cache: each dtype on its own backend (kv_mla_bench.py)
        heads = {"mla": shapes_model.mla.model_dump(), "max_model_len": served_max_model_len(session.config.service)}
    elif shapes_model.attention is not None:
        heads = shapes_model.attention.model_dump()
    else:
        return {"kv_not_measured": "the model's attention heads are not known from its config.json"}
    spec = {**heads, "block_size": KV_BLOCK_SIZE, "points": kv_points(session)}
    local = ctx.artifacts_dir / "kv_spec.json"
    write_atomic(local, json.dumps(spec).encode())
    remote = f"{session.workdir}/gemm/kv_spec.json"
    session.host().put(local, remote)
    try:
        measured = run_json_script(
            session,
            KV_SCRIPT,
            [remote, "--repeats", str(session.config.gemm.repeats)],
            timeout_s=1800,
            progress=ctx.progress,
        )
    except TaskFailed as err:  # a kernel that crashed the process: the GEMMs stand, the option stays assumed
        ctx.log(f"FP8 KV micro failed: {err}")
        return {"kv_not_measured": f"kv_bench.py failed on the host ({str(err)[:300]})"}
    rows = measured.get("rows", [])
    timed = [row for row in rows if row.get("us") is not None]
    ctx.log(f"FP8 KV micro: {len(timed)} of {len(rows)} points timed")
    return {"kv_rows": rows}


def drafter_micro(ctx: TaskContext, session: Session, host: HostFacts) -> dict:
    """vLLM's GPU n-gram drafter a step over the single-stream requests' recorded contexts, at every
    level the campaign serves (ngram_gpu_bench.py), with the shipped rules' drafter settings (each row
    holds them; a decision record whose rules draft otherwise leaves the rows out): the part of the
    `speculative_decoding_gpu` option's step cost measurable before its experiment. Where it cannot
    run, the result says why and the option keeps its stated assumption."""
    if host.accelerator != "cuda":
        return {"drafter_not_measured": "the GPU n-gram drafter runs on CUDA only"}
    single = ctx.optional_input(MACRO_SINGLE)
    kept = single.token_ids if single else None
    if not kept:
        return {"drafter_not_measured": "macro_single recorded no token ids to draft over"}
    macro, profile = session.config.macro, session.config.profile
    spec = {
        "contexts": [request.prompt + request.output for request in kept],
        "sequences": sorted(set(concurrency_levels(macro.concurrency_max)) | {profile.concurrency}),
        **DRAFTER_SETTINGS,
    }
    local = ctx.artifacts_dir / "drafter_spec.json"
    write_atomic(local, json.dumps(spec).encode())
    remote = f"{session.workdir}/gemm/drafter_spec.json"
    session.host().put(local, remote)
    try:
        measured = run_json_script(session, DRAFTER_SCRIPT, [remote], timeout_s=600, progress=ctx.progress)
    except TaskFailed as err:  # the GEMMs and the KV micro stand; the option stays assumed
        ctx.log(f"GPU drafter micro failed: {err}")
        return {"drafter_not_measured": f"ngram_gpu_bench.py failed on the host ({str(err)[:300]})"}
    rows = measured.get("drafter_rows", [])
    ctx.log(f"GPU drafter micro: {sum(row.get('us') is not None for row in rows)} of {len(rows)} levels timed")
    return {"drafter_rows": rows}
