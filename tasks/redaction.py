"""Values that may be secrets (environment values, the assignments of host.env_setup) as they are
shown and stored: digested, so a change is still seen and a token is never written down, in the
todo file, the findings, the ledger or a log."""

from __future__ import annotations

import hashlib
import re


def digest(value: str) -> str:
    """A value shown as its digest: a change is seen, the value is never written down."""
    return "sha256:" + hashlib.sha256(value.encode()).hexdigest()[:12]


def redacted_env(env: dict[str, str]) -> dict[str, str]:
    """Environment values as digests: a change is seen, a token is never written down."""
    return {key: digest(value) for key, value in env.items()}


_ASSIGNMENT = re.compile(r"""\b([A-Za-z_][A-Za-z0-9_]*)=("(?:[^"\\]|\\.)*"|'[^']*'|[^\s;&|]+)""")


def redacted_shell(line: str | None) -> str | None:
    """A shell line (host.env_setup) with every assigned value digested and the names kept:
    `export HF_TOKEN=hf_...; source venv/bin/activate` -> `export HF_TOKEN=sha256:...; source ...`."""
    if line is None:
        return None
    return _ASSIGNMENT.sub(lambda m: f"{m.group(1)}={digest(m.group(2))}", line)
