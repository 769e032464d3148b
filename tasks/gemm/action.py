"""The `gemm` phase's work: the GEMMs of one decode step per rank, timed with the accelerators
free, at the shapes the model facts derived (config.json, TP, quantization)."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.atomic import write_atomic
from orchestrator.campaign import TaskContext
from tasks.gemm.results import GemmResult
from tasks.host import HostFacts
from tasks.host_json import run_json_script
from tasks.model import ModelFacts
from tasks.session import Session

GEMM_SCRIPT = Path(__file__).parent / "remote" / "gemm_bench.py"


def gemm_action(session: Session):
    def run(ctx: TaskContext) -> GemmResult:
        shapes_model = ctx.result_of("model_facts", ModelFacts).require_shapes()
        accelerator = ctx.result_of("host_facts", HostFacts).accelerator
        cfg = session.config.gemm
        shapes = shapes_model.gemm_rows(cfg.batch_sizes)
        if cfg.compare_w4a16:
            shapes += [{**row, "dtype": "w4a16", "name": row["name"] + " (as W4A16)"}
                       for row in shapes if row["dtype"] == "bf16"]
        local = ctx.artifacts_dir / "shapes.json"
        write_atomic(local, json.dumps(shapes).encode())
        remote = f"{session.workdir}/gemm/shapes.json"
        session.host().put(local, remote)
        fp8 = shapes_model.weight_dtype == "fp8"
        int4_group = None if fp8 else shapes_model.group_size
        fp8_block = (shapes_model.group_size or 0) if fp8 else 128
        measured = run_json_script(session, GEMM_SCRIPT,
                                   [remote, "--repeats", str(cfg.repeats),
                                    "--group-size", str(int4_group or cfg.int4_group_size),
                                    "--fp8-block", str(fp8_block), "--device", accelerator],
                                   timeout_s=3600)
        artifact = ctx.artifacts_dir / "gemm.json"
        write_atomic(artifact, json.dumps(measured, indent=1).encode())
        result = GemmResult.model_validate({**measured, "artifact": str(artifact)})
        timed = [row for row in result.rows if row.us is not None]
        ctx.log(f"{len(timed)} of {len(result.rows)} shapes timed on {result.info.device};"
                f" copy ceiling {result.copy_ceiling_gbps:.1f} GB/s")
        return result

    return run
