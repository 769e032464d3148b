"""Phase 2: the two suspects at the model's exact sizes, with the accelerators free.

2a: GEMMs of one decode step per rank (shapes from config.json, TP and quantization).
2b: all-reduces across the TP ranks at the decode message sizes plus a power-of-two sweep,
    and the per-decode-step prediction: all-reduces a step x latency at that size.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from orchestrator.atomic import write_atomic
from orchestrator.campaign import TaskContext
from orchestrator.errors import InputError
from tasks.gemm_shapes import derive_shapes
from tasks.hostjson import run_json_script
from tasks.session import Session

BF16_BYTES = 2


def model_shapes(session: Session, ctx: TaskContext) -> dict[str, Any]:
    path = ctx.result_of("model_config")["config_artifact"]
    try:
        with open(path) as handle:
            config = json.load(handle)
    except json.JSONDecodeError as err:
        raise InputError(f"{path}: not valid JSON ({err}); check the model's config.json") from None
    return derive_shapes(config, session.config.service.tensor_parallel,
                         session.config.gemm.batch_sizes, source=f"{path}")


def gemm_action(session: Session):
    def run(ctx: TaskContext) -> dict[str, Any]:
        derived = model_shapes(session, ctx)
        shapes = list(derived["shapes"])
        if session.config.gemm.compare_w4a16:
            shapes += [{**row, "dtype": "w4a16", "name": row["name"] + " (as W4A16)"}
                       for row in derived["shapes"] if row["dtype"] == "bf16"]
        local = ctx.artifacts_dir / "shapes.json"
        write_atomic(local, json.dumps(shapes).encode())
        remote = f"{session.workdir}/gemm/shapes.json"
        session.host().put(local, remote)
        cfg = session.config.gemm
        fp8 = derived["weight_dtype"] == "fp8"
        int4_group = None if fp8 else derived.get("group_size")
        fp8_block = (derived.get("group_size") or 0) if fp8 else 128
        measured = run_json_script(session, "gemm_bench.py",
                                   [remote, "--repeats", str(cfg.repeats),
                                    "--group-size", str(int4_group or cfg.int4_group_size),
                                    "--fp8-block", str(fp8_block)],
                                   timeout_s=3600)
        artifact = ctx.artifacts_dir / "gemm.json"
        write_atomic(artifact, json.dumps(measured, indent=1).encode())
        timed = [r for r in measured["rows"] if "us" in r]
        ctx.log(f"{len(timed)} of {len(measured['rows'])} shapes timed on {measured['info']['device']};"
                f" copy ceiling {measured['copy_ceiling_gbps']:.1f} GB/s")
        return {"derived": {k: v for k, v in derived.items() if k != "shapes"},
                "shapes": derived["shapes"], "info": measured["info"],
                "copy_ceiling_gbps": measured["copy_ceiling_gbps"], "rows": measured["rows"],
                "artifact": str(artifact)}

    return run


def message_sizes(hidden: int, decode_tokens: list[int], low: int, high: int) -> tuple[list[int], list[int]]:
    model = sorted({tokens * hidden * BF16_BYTES for tokens in decode_tokens})
    sweep, size = [], low
    while size <= high:
        sweep.append(size)
        size *= 2
    return model, sorted(set(model) | set(sweep))


def allreduce_action(session: Session):
    def run(ctx: TaskContext) -> dict[str, Any]:
        derived = model_shapes(session, ctx)
        cfg = session.config.allreduce
        tp = session.config.service.tensor_parallel
        model_sizes, sizes = message_sizes(derived["hidden_size"], cfg.decode_tokens,
                                           cfg.sweep_min_bytes, cfg.sweep_max_bytes)
        accelerator = session.host().run(
            [session.python, "-c", "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')"],
            timeout_s=120).stdout.strip()
        variants: list[dict[str, str]] = [{}]
        if accelerator == "cuda" and cfg.nccl_variants:
            variants += [{"NCCL_ALGO": algo, "NCCL_PROTO": proto}
                         for algo in ("Ring", "Tree") for proto in ("LL", "LL128", "Simple")]
        runs = []
        for index, env in enumerate(variants):
            launcher = [session.python, "-m", "torch.distributed.run", "--nproc-per-node", str(tp),
                        "--master-port", str(29400 + index)]
            try:
                result = run_json_script(
                    session, "allreduce_bench.py",
                    ["--sizes", ",".join(map(str, sizes)), "--iterations", str(cfg.iterations)],
                    timeout_s=1800, env={"OMP_NUM_THREADS": "1", **env}, launcher=launcher)
            except Exception as err:  # noqa: BLE001 - a forced NCCL variant may be invalid here
                if not env:
                    raise
                runs.append({"env": env, "error": str(err)[:300]})
                continue
            result["env"] = env
            runs.append(result)
            ctx.log(f"{result['backend']} {shlex.join(f'{k}={v}' for k, v in env.items()) or 'default'}:"
                    f" {len(result['rows'])} sizes")
        default = runs[0]
        # Predict with the path the server takes: on CPU that is vLLM's shared-memory all-reduce
        # where the host has it, not gloo.
        if default.get("vllm_shm_rows"):
            predicted_by = "vLLM CPU shared-memory all-reduce (_C::shm_allreduce)"
            by_size = {row["bytes"]: row for row in default["vllm_shm_rows"]}
        else:
            predicted_by = f"torch.distributed {default['backend']}"
            by_size = {row["bytes"]: row for row in default["rows"]}
        per_step = derived["allreduces_per_step"]
        predictions = []
        for tokens, size in zip(sorted(cfg.decode_tokens), model_sizes, strict=False):
            row = by_size.get(size)
            if row:
                predictions.append({"decode_tokens": tokens, "bytes": size,
                                    "latency_us": row["latency_us"], "allreduces_per_step": per_step,
                                    "predicted_ms_per_step": per_step * row["latency_us"] / 1000})
        artifact = ctx.artifacts_dir / "allreduce.json"
        write_atomic(artifact, json.dumps(runs, indent=1).encode())
        return {"backend": default["backend"], "world_size": default["world_size"],
                "model_sizes_bytes": model_sizes, "runs": runs, "predictions": predictions,
                "predicted_by": predicted_by,
                "allreduces_per_step_source": "2 per layer (attention o_proj, MLP/MoE down) + 1"
                                              " (vocab-parallel embedding), from config.json",
                "artifact": str(artifact)}

    return run
