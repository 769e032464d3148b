"""The schema of `rules.toml` (kernel name -> category): every key checked, like every other
file a user edits. A misspelt key (`pattern =` for `patterns =`) is one line naming the file,
the rule and the key, never a rule silently ignored."""

from __future__ import annotations

import difflib
import re
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from orchestrator.errors import InputError
from tasks.analysis.categories import OTHER


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RuleSpec(_Strict):
    category: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    patterns: list[str] = Field(min_length=1)

    @field_validator("patterns")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as err:
                raise ValueError(f"pattern {pattern!r} is not a regular expression ({err})") from None
        return patterns


class RulesDocument(_Strict):
    categories: list[str] | None = Field(None, description="every category, in the breakdown's order")
    rule: list[RuleSpec] = Field(min_length=1)

    def declared(self) -> list[str]:
        """The categories in order (the list, or the rules' in file order), then "other"."""
        names = self.categories or list(dict.fromkeys(rule.category for rule in self.rule))
        return list(dict.fromkeys([*names, OTHER]))


def load_rules_document(path: Path) -> RulesDocument:
    """``path`` read and checked; every problem is one line naming the file, rule and key."""
    try:
        document: dict[str, Any] = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise InputError(f"{path}: bad rules file (not valid TOML: {err}); fix the syntax there") from None
    except OSError as err:
        raise InputError(f"{path}: cannot be read ({err.strerror}); check the rules path") from None
    try:
        rules = RulesDocument.model_validate(document)
    except ValidationError as err:
        # A misspelt key shows as an unknown key and a missing one: name the misspelling.
        first = sorted(err.errors(), key=lambda error: error["type"] != "extra_forbidden")[0]
        loc = [str(part) for part in first["loc"]]
        where = (
            f"[[rule]] #{int(loc[1]) + 1} key '{'.'.join(loc[2:])}'"
            if loc[:1] == ["rule"] and len(loc) > 2
            else f"key '{'.'.join(loc)}'"
        )
        known = RuleSpec.model_fields if loc[:1] == ["rule"] else RulesDocument.model_fields
        close = difflib.get_close_matches(loc[-1], list(known), n=1)
        fix = (
            f"unknown key{f' (did you mean {close[0]!r}?)' if close else ''}: a [[rule]] has category and"
            " patterns, the file a categories list"
            if first["type"] == "extra_forbidden"
            else "each [[rule]] needs category and patterns"
        )
        raise InputError(f"{path}: bad rules file: {where}: {first['msg']}; {fix}") from None
    undeclared = sorted({rule.category for rule in rules.rule} - set(rules.declared()))
    if undeclared:
        raise InputError(
            f"{path}: field 'categories': rules use {', '.join(undeclared)}, which the"
            " list does not declare; add them to `categories`"
        )
    return rules
