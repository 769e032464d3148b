"""The model's part of `orchestrate check`: the model folder and its config.json on the host,
and the request lengths against the context the server will allow."""

from __future__ import annotations

import shlex

from orchestrator.campaign import Check
from tasks.session import Session


def model_checks(session: Session) -> list[Check]:
    cfg = session.config
    checks = []
    if cfg.service.model is None:
        checks.append(Check("model", "the embedded tiny model, generated on the host at the first run"))
    else:
        host = session.host()
        path = shlex.quote(cfg.service.model)
        found = host.run(f"test -f {path}/config.json", check=False, timeout_s=30)
        checks.append(
            Check(
                "service.model",
                f"{cfg.service.model}/config.json found on {host.name}"
                if found.exit_code == 0
                else f"{cfg.service.model} has no config.json on {host.name}; set service.model to"
                " the model's folder on the host (a hub name needs the folder it downloads to)",
                blocking=found.exit_code != 0,
            )
        )
    if "macro" in session.enabled:
        wanted = cfg.macro.input_tokens + cfg.macro.output_tokens
        checks.append(
            Check(
                "service.max_model_len",
                f"{cfg.macro.input_tokens} input + {cfg.macro.output_tokens}"
                f" output tokens fit in {cfg.service.max_model_len}"
                if wanted <= cfg.service.max_model_len
                else f"{wanted} tokens a request exceed {cfg.service.max_model_len}: raise"
                " service.max_model_len or lower macro.input_tokens/output_tokens",
                blocking=wanted > cfg.service.max_model_len,
            )
        )
        files = [("macro.dataset_path", cfg.macro.dataset_path if cfg.macro.dataset == "sharegpt" else None)]
        files.append(("macro.conversations_path", cfg.macro.conversations_path if cfg.macro.conversations else None))
        for field, wanted_file in files:
            if wanted_file:
                checks.append(readable_on_host(session, field, wanted_file))
    return checks


def readable_on_host(session: Session, field: str, path: str) -> Check:
    """A file the load client reads on the host is there."""
    host = session.host()
    found = host.run(["test", "-r", path], check=False, timeout_s=30)
    return Check(
        field,
        f"{path} readable on {host.name}"
        if found.exit_code == 0
        else f"{path} is not a readable file on {host.name}: the load client"
        " reads it there; copy the ShareGPT JSON to the host or fix the path",
        blocking=found.exit_code != 0,
    )
