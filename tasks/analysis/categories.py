"""The categories the shipped `rules.toml` declares, as the names other code reads them by.

The findings' cross-phase code (the bottleneck, the cross-checks, the decode-step model, the
decision figures) reads a category by ``Category.COMMUNICATION``, not by a string: rename a
category in rules.toml and loading this module fails with the name the code needs, instead of
the bottleneck section reading 0 ms. Read with tomllib alone (the analyser's workers import
this; the schema check is in rules_schema.py, run whenever a Classifier loads the file).
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from orchestrator.errors import InputError
from orchestrator.tomlfile import read_toml

RULES_PATH = Path(__file__).with_name("rules.toml")
OTHER = "other"
REQUIRED = ("communication", "gemm", "attention", "moe")
"""The categories the cross-phase code reads (tasks/synthesis, tasks/analysis)."""


def category_enum(path: Path) -> type[StrEnum]:
    """A StrEnum of ``path``'s `categories` list and "other"; it equals (and hashes as) its name,
    so ``categories.get(Category.GEMM)`` reads a stored result's plain-string keys."""
    declared = read_toml(path).get("categories") or []
    if not isinstance(declared, list) or not all(isinstance(name, str) for name in declared):
        raise InputError(f"{path}: field 'categories': a list of category names; fix it there")
    missing = [name for name in REQUIRED if name not in declared]
    if missing:
        raise InputError(
            f"{path}: field 'categories': lacks {', '.join(missing)}, which the findings read;"
            " keep the name, or rename it in tasks/analysis/categories.py and where Category is read"
        )
    return StrEnum("Category", {name.upper(): name for name in [*declared, OTHER]})


Category = category_enum(RULES_PATH)
