"""What the rules leave uncovered, and what kind of workload a trace is.

A kernel family (its name without template arguments, parameters and tile suffixes) that no rule
matches and that takes more than `GUARD_PCT` of the step's device time is named, with its share,
so a new stack's kernels never vanish silently into `other`; `orchestrate analyze --strict`
fails on it. A trace whose device time is largely backward kernels is a training trace, and the
breakdown says so rather than reading it as inference.
"""

from __future__ import annotations

import re

import numpy as np

from tasks.analysis.categories import Category

GUARD_PCT = 2.0
BACKWARD_PCT = 5.0
"""A trace with this share of its device time in backward kernels is called a training trace."""
BACKWARD = re.compile(r"backward|bwd|wgrad|dgrad|_wrw_|optimizer|adam_|multi_tensor_apply.*(adam|sgd)", re.I)
MANGLED_PART = re.compile(r"(\d+)([A-Za-z_]\w*)")
TOKEN_WITH_DIGIT = re.compile(r"\d")


def family(name: str) -> str:
    """`void ns::kernel<...>(...)` -> `ns::kernel`; `_ZN5aiter24add_rmsnorm_quant_kernelI...` ->
    `aiter::add_rmsnorm_quant_kernel`; `Cijk_Alik_Bljk_BBS_..._MT128x256x32_...` -> `Cijk_Alik_Bljk`
    (underscore words up to the first with a digit, at most three)."""
    text = name.removeprefix("void ").strip()
    if text.startswith("_ZN"):
        parts, rest = [], text[3:]
        while (match := MANGLED_PART.match(rest)) and len(parts) < 3:
            length = int(match[1])
            word = match[2][:length]
            parts.append(word)
            rest = rest[len(match[1]) + length :]
            if len(word) < length:
                break
        return "::".join(parts) or text[:60]
    text = re.split(r"[<(\s]", text, maxsplit=1)[0] or text[:60]
    words = text.split("_")
    kept = []
    for index, word in enumerate(words):
        if index and (TOKEN_WITH_DIGIT.search(word) or len(kept) >= 3):
            break
        kept.append(word)
    return "_".join(kept) or text


def uncovered_families(
    name_us: np.ndarray, names: list[str], category_of_name: list[str], device_us: float, guard_pct: float = GUARD_PCT
) -> list[dict]:
    """Families of `other` names above ``guard_pct`` of device time, largest first."""
    if not device_us:
        return []
    grouped: dict[str, list] = {}
    for index in np.nonzero(name_us)[0]:
        if category_of_name[index] == Category.OTHER:
            entry = grouped.setdefault(family(names[index]), [0.0, 0, names[index]])
            entry[0] += float(name_us[index])
            entry[1] += 1
    return [
        {"family": name, "share_pct": us / device_us * 100, "names": count, "example": example[:200]}
        for name, (us, count, example) in sorted(grouped.items(), key=lambda item: -item[1][0])
        if us / device_us * 100 > guard_pct
    ]


def backward_share(name_us: np.ndarray, names: list[str], device_us: float) -> float:
    """Share of device time in backward-pass and optimizer kernels (FlashAttnBwd, *_backward_*,
    MIOpen's bwd/wrw convolutions, ...)."""
    if not device_us:
        return 0.0
    used = np.nonzero(name_us)[0]
    return float(sum(name_us[i] for i in used if BACKWARD.search(names[i])) / device_us * 100)
