"""The schema of `rules.toml` (kernel name -> category): every key checked, like every other
file a user edits. A misspelt key (`pattern =` for `patterns =`) is one line naming the file,
the rule and the key, never a rule silently ignored.

A msgspec schema rather than pydantic's: every analyser worker loads the rules, msgspec is
already loaded there (it decodes the traces), and pydantic's import would add ~0.15 s to each
analysis process, a tenth of an 8-rank analysis (the >= 30x-HTA target, benchmarks/).
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import msgspec

from orchestrator.errors import InputError
from orchestrator.tomlfile import read_toml
from tasks.analysis.categories import OTHER, REQUIRED

CATEGORY_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class RuleSpec(msgspec.Struct, forbid_unknown_fields=True):
    category: str
    patterns: list[str]
    own_time: bool = False
    """A CPU op it matches counts only its own time (outside its children) under the category,
    so a wrapper (torch.compile's graph call) is named without swallowing the ops inside it."""


class RulesDocument(msgspec.Struct, forbid_unknown_fields=True):
    rule: list[RuleSpec]
    categories: list[str] | None = None
    """Every category, in the breakdown's order ("other" comes last by itself)."""

    def declared(self) -> list[str]:
        """The categories in order (the list, or the rules' in file order), then "other"."""
        names = self.categories or list(dict.fromkeys(rule.category for rule in self.rule))
        return list(dict.fromkeys([*names, OTHER]))


FIELDS = {"rule": RuleSpec.__struct_fields__, "": RulesDocument.__struct_fields__}
UNKNOWN = re.compile(r"Object contains unknown field `(?P<key>[^`]+)`(?: - at `\$\.rule\[(?P<index>\d+)\]`)?")


def load_rules_document(path: Path) -> RulesDocument:
    """``path`` read and checked; every problem is one line naming the file, rule and key."""
    document = read_toml(path, "bad rules file: ")
    try:
        rules = msgspec.convert(document, RulesDocument)
    except msgspec.ValidationError as err:
        raise InputError(f"{path}: bad rules file: {_explain(str(err))}") from None
    for index, rule in enumerate(rules.rule, 1):
        where = f"{path}: bad rules file: [[rule]] #{index}"
        if not CATEGORY_NAME.match(rule.category):
            raise InputError(f"{where} key 'category': {rule.category!r} is not a lower-case name; use a-z, 0-9, _")
        if not rule.patterns:
            raise InputError(f"{where} key 'patterns': empty; give at least one regular expression")
        for pattern in rule.patterns:
            if not pattern.strip() or re.fullmatch(r"\.?[*+]?|\^|\$|\^\$", pattern.strip()):
                # It matches every name: every kernel would land in this one category.
                raise InputError(f"{where} key 'patterns': {pattern!r} matches every name; give a kernel name's part")
            try:
                re.compile(pattern)
            except re.error as error:
                raise InputError(f"{where} key 'patterns': {pattern!r} is not a regular expression ({error})") from None
    if not rules.rule:
        raise InputError(f"{path}: bad rules file: no [[rule]]; each [[rule]] needs category and patterns")
    missing = [name for name in REQUIRED if name not in rules.declared()]
    if missing:
        # The findings and the summary read these: a renamed one would read 0% silently.
        raise InputError(
            f"{path}: field 'categories': lacks {', '.join(missing)}, which the breakdown's summary and"
            " the findings read; keep those names (add your own categories beside them)"
        )
    undeclared = sorted({rule.category for rule in rules.rule} - set(rules.declared()))
    if undeclared:
        raise InputError(
            f"{path}: field 'categories': rules use {', '.join(undeclared)}, which the"
            " list does not declare; add them to `categories`"
        )
    return rules


def _explain(message: str) -> str:
    """msgspec's message as the key, the rule and the fix ("`pattern`" -> did you mean 'patterns')."""
    unknown = UNKNOWN.match(message)
    if unknown:
        key, index = unknown["key"], unknown["index"]
        close = difflib.get_close_matches(key, FIELDS["rule" if index is not None else ""], n=1)
        where = f"[[rule]] #{int(index) + 1} key '{key}'" if index is not None else f"key '{key}'"
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"{where}: unknown key{hint}; a [[rule]] has category, patterns and own_time, the file a categories list"
    at = re.search(r"at `\$\.rule\[(\d+)\]\.?(\w*)`", message)
    where = f"[[rule]] #{int(at[1]) + 1}" + (f" key '{at[2]}'" if at and at[2] else "") if at else "the file"
    return f"{where}: {message.split(' - at ')[0]}; each [[rule]] needs category and patterns"
