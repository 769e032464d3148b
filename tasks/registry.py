"""The one list of phase units, in campaign order (the findings follow it too).

Adding a phase: write its unit (a package under tasks/ with ``UNIT``), add it here.
"""

from __future__ import annotations

from tasks import (
    allreduce,
    analysis,
    commands,
    experiments,
    gemm,
    host,
    macro,
    model,
    profile,
    service,
)
from tasks.unit import PhaseUnit

UNITS: list[PhaseUnit] = [
    host.UNIT,
    model.UNIT,
    service.UNIT,
    macro.UNIT,
    profile.UNIT,
    analysis.UNIT,
    gemm.UNIT,
    allreduce.UNIT,
    commands.UNIT,
]
UNITS.append(experiments.make_unit(list(UNITS)))  # last: it re-runs the phases above on variant servers
