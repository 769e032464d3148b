"""The setup section: the host, the model and the server, from the facts recorded once."""

from __future__ import annotations

from orchestrator.report import md_table
from tasks.host.results import HOST_FACTS
from tasks.model.results import MODEL_FACTS
from tasks.service.results import SERVICE_READY
from tasks.view import Findings, fmt


def setup_section(findings: Findings) -> str:
    host = findings.result(HOST_FACTS)
    model = findings.result(MODEL_FACTS)
    ready = findings.result(SERVICE_READY)
    if not (host or model or ready):
        return ""
    cfg = findings.session.config
    if host and host.nodes:
        tp = cfg.service.tensor_parallel
        per_node = tp // len(host.nodes)
        rows = [
            [
                f"node {n.index}" + (" (head)" if n.index == 0 else ""),
                f"{n.name} ({n.hostname}): ranks {n.index * per_node}-{(n.index + 1) * per_node - 1},"
                f" {n.cpu_count} cores, {n.gpu_count} GPUs, python {n.python} / torch {n.torch} / {n.vllm}",
            ]
            for n in host.nodes
        ]
    else:
        rows = [["host", f"{cfg.host.kind} ({cfg.host.alias or cfg.host.hostname or 'this machine'})"]]
    if host:
        accelerators = "; ".join(host.gpus) if host.gpus else "none (CPU)"
        rows += [
            ["kernel", host.uname],
            ["accelerators", f"{accelerators} (accelerator: {host.accelerator}, from {host.accelerator_source})"],
            ["CPU cores", str(host.cpu_count)],
            ["python / torch / vLLM", f"{host.python} / {host.torch} / {host.vllm}"],
        ]
    if model:
        quant = model.weight_dtype + (f", group {model.group_size}" if model.group_size else "")
        rows.append(
            [
                "model",
                f"{model.model} ({model.model_type or '?'}"
                f"{', generated tiny random-weight model' if model.generated else ''};"
                f" weights declared {quant})",
            ]
        )
    rows.append(["tensor parallel", str(cfg.service.tensor_parallel)])
    if ready:
        rows.append(["server ready after", f"{fmt(ready.ready_s)} s" + (" (adopted)" if ready.adopted else "")])
    text = "## Setup\n\n" + md_table(["what", "value"], rows)
    if host and host.topology:
        text += f"\nInterconnect (`nvidia-smi topo -m`):\n\n```\n{host.topology}\n```\n"
    if host and host.cpu:
        text += f"\nCPU (`lscpu`):\n\n```\n{host.cpu}\n```\n"
    sources = [
        findings.link(host.artifact, "host facts") if host else "",
        findings.link(model.config_artifact, "config.json") if model else "",
    ]
    text += "\nSources: " + ", ".join(s for s in sources if s)
    if ready and ready.log:
        text += f", server log on the host: `{ready.log}`"
    return text + "\n"
