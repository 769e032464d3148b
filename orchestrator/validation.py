"""Turn pydantic validation errors into one readable line: file, field path, problem, fix."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError


def one_line(error: ValidationError, source: Path | str, fix: str) -> str:
    first = error.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or "(top level)"
    problem = first["msg"]
    if first["type"] == "extra_forbidden":
        problem = "unknown key"
    elif first["type"] == "literal_error" and "version" in field:
        problem = f"unsupported version {first.get('input')!r} ({first['msg']})"
    more = f" (and {len(error.errors()) - 1} more)" if len(error.errors()) > 1 else ""
    return f"{source}: field '{field}': {problem}{more}; {fix}"
