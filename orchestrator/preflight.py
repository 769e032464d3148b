"""The pre-flight at `resume`: what `orchestrate check` finds, before anything long starts.

A problem found now costs seconds; found by the task that meets it, it can cost a 30-minute
model load first. The checks run once a configuration: a pass is remembered in
`preflight.json` beside the todo file under a fingerprint of every task's inputs, so a resumed
campaign (same configuration) does not probe again, and any change to the config does.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from orchestrator.atomic import write_atomic
from orchestrator.campaign import Campaign
from orchestrator.errors import HostError, InputError

CACHE_NAME = "preflight.json"


def fingerprint(campaign: Campaign) -> str:
    """What the checks depend on: the campaign's tasks and the config parts each declared."""
    described = [[spec.id, spec.kind, sorted(spec.needs), spec.inputs] for spec in campaign.tasks]
    text = json.dumps([campaign.name, described], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def preflight_at_resume(campaign: Campaign, state_path: Path, log: Callable[[str], None] = print) -> None:
    """Run the checks unless this configuration passed them before; a blocking problem stops the
    resume (exit 2, each problem a line) before the state is touched; a host that cannot be
    reached is exit 4, as it would be from the first task."""
    if campaign.preflight is None:
        return
    cache = state_path.parent / CACHE_NAME
    key = fingerprint(campaign)
    try:
        passed = json.loads(cache.read_text()) if cache.is_file() else {}
    except (OSError, ValueError):
        passed = {}  # unreadable: check again, and write it anew
    if passed.get("fingerprint") == key:
        return
    started = time.monotonic()
    checks = campaign.preflight()
    if not checks:
        return
    unreachable = [check for check in checks if check.blocking and check.unreachable]
    if unreachable:
        raise HostError(f"pre-flight: {unreachable[0].what}: {unreachable[0].found}")
    blocking = [check for check in checks if check.blocking]
    for check in blocking:
        log(f"FAIL  {check.what}: {check.found}")
    if blocking:
        raise InputError(
            f"pre-flight: {len(blocking)} problem{'s' * (len(blocking) > 1)} would stop the campaign"
            " (each above, with its fix); nothing was started. `orchestrate check` lists every check"
        )
    write_atomic(
        cache,
        json.dumps(
            {
                "fingerprint": key,
                "passed_at": datetime.now(UTC).isoformat(),
                "checks": [f"{check.what}: {check.found}" for check in checks],
            },
            indent=1,
        ).encode(),
    )
    log(
        f"pre-flight: {len(checks)} checks passed in {time.monotonic() - started:.1f} s"
        " (not repeated until the configuration changes)"
    )
