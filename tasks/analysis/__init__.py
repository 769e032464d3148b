"""The `analysis` unit: the captured traces broken down by category per rank (the rules in
`tasks/analysis/rules.toml` are the one place categories are declared).

The unit itself (``UNIT``) is in `phase.py`, loaded on first use: the analyser is also a tool of
its own (`orchestrate analyze`) and runs in worker processes that import this package, and a
unit pulls in the engine's schemas (pydantic), which cost each worker ~0.4 s of a 2 s analysis.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "UNIT":
        from tasks.analysis.phase import UNIT

        return UNIT
    raise AttributeError(f"module 'tasks.analysis' has no attribute {name!r}")
