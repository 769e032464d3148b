"""The serving unit's part of `orchestrate check`: what the power telemetry will read on the host."""

from __future__ import annotations

from pathlib import Path

from orchestrator.campaign import Check
from orchestrator.errors import OrchestrateError
from tasks.host_json import last_json
from tasks.session import Session

TELEMETRY_SCRIPT = Path(__file__).parent / "remote" / "telemetry.py"


def macro_checks(session: Session) -> list[Check]:
    """Never blocking: a host with nothing to read still serves; the findings then say no energy
    was measured. Said before the campaign, so a missing nvidia-ml-py can be installed first."""
    if not session.config.macro.telemetry_interval_s:
        return [Check("macro.telemetry_interval_s", "0: no power telemetry sampled")]
    try:
        # the script's text as `python -c`: `check` writes nothing on the host, not even a script
        host = session.host()
        ran = host.run([session.python, "-c", TELEMETRY_SCRIPT.read_text(), "--probe"], timeout_s=60)
        found = last_json(TELEMETRY_SCRIPT.name, host.name, ran.stdout, ran.stderr)
    except OrchestrateError as err:
        return [Check("macro.telemetry_interval_s", f"the telemetry probe failed ({err}); energy will not be measured")]
    if found.get("source") == "nvml":
        devices = found.get("devices") or []
        names = ", ".join(sorted(set(filter(None, devices)))) or "unnamed"
        return [Check("macro.telemetry_interval_s", f"NVML: {len(devices)} GPU(s) ({names}): power and energy sampled")]
    if found.get("source") == "rapl":
        return [Check("macro.telemetry_interval_s", "no NVML GPU; CPU package energy from RAPL sampled")]
    why = str(found.get("why"))
    install = "; pip install nvidia-ml-py into the host's Python" if "no pynvml" in why else ""
    return [
        Check(
            "macro.telemetry_interval_s",
            f"nothing to read ({why}): the findings will say no energy was measured{install}",
        )
    ]
