"""What a run cost in power: the host's telemetry (remote/telemetry.py samples it beside each
measured run) summed up per level, and the energy figures users ask for (joules a request,
output tokens a joule). Energy comes from the board's own counter where it has one (NVML's
total energy, RAPL's package energy), else from the mean sampled power times the run's time;
the figure says which."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from tasks.models import Result

IDLE = "gpu_idle"
"""The one throttle reason that is no slowdown: the clocks are low because nothing runs."""


class Telemetry(Result):
    source: str | None = Field(description="nvml (GPUs), rapl (CPU packages), or None: nothing was measured")
    why_none: str | None = Field(None, description="why no source answered")
    devices: list[str] = Field(default_factory=list)
    interval_s: float | None = None
    runs: int = Field(1, description="runs pooled")
    duration_s: float = 0.0
    samples: int = 0
    power_w_mean: float | None = Field(None, description="the sum over devices, mean over samples")
    power_w_peak: float | None = Field(None, description="the highest sample of the sum over devices")
    energy_j: float | None = Field(None, description="the energy counters' difference over the runs, all devices")
    energy_j_from_power: float | None = Field(None, description="mean power x each run's duration, summed")
    sm_mhz_mean: float | None = None
    sm_mhz_min: float | None = None
    mem_mhz_mean: float | None = None
    temp_c_max: float | None = None
    util_pct_mean: float | None = None
    mem_used_mib_max: float | None = None
    throttle_pct: dict[str, float] = Field(
        default_factory=dict, description="throttle reason -> % of samples it was active on any device"
    )
    samples_lost: int = Field(0, description="samples the source could not read, left out (the first reason below)")
    sample_error: str | None = None

    @property
    def energy(self) -> tuple[float | None, str]:
        """The run's energy and how it was had: the counter where there is one."""
        if self.energy_j is not None:
            return self.energy_j, "energy counter"
        if self.energy_j_from_power is not None:
            return self.energy_j_from_power, "mean power x time"
        return None, "not measured"

    @property
    def slowdowns(self) -> dict[str, float]:
        """Throttle reasons other than idle that were active in some sample."""
        return {name: pct for name, pct in self.throttle_pct.items() if name != IDLE and pct > 0}


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _one(document: dict[str, Any]) -> Telemetry:
    """One run's document (remote/telemetry.py) summed up."""
    if not document.get("source"):
        return Telemetry(source=None, why_none=document.get("why") or "no telemetry source answered")
    fields = document["fields"]
    column = {name: index for index, name in enumerate(fields)}
    samples = document.get("samples") or []

    def values(name: str) -> list[float]:
        return [row[column[name]] for _, rows in samples for row in rows if row[column[name]] is not None]

    power = column["power_w"]
    totals = [sum(r[power] for r in rows) for _, rows in samples if rows and all(r[power] is not None for r in rows)]
    start, stop = document.get("energy_mj_start") or [], document.get("energy_mj_stop") or []
    counted = start and len(start) == len(stop) and None not in start and None not in stop
    duration = float(document.get("duration_s") or 0.0)
    names = document.get("reason_names") or {}
    active: dict[str, int] = {}
    for _, rows in samples:
        mask = 0
        for row in rows:
            mask |= row[column["reasons"]] or 0
        for bit, name in names.items():
            if mask & int(bit):
                active[name] = active.get(name, 0) + 1
    return Telemetry(
        source=document["source"],
        devices=document.get("devices") or [],
        interval_s=document.get("interval_s"),
        duration_s=duration,
        samples=len(samples),
        power_w_mean=_mean(totals),
        power_w_peak=max(totals) if totals else None,
        energy_j=_counted_mj(start, stop, document.get("energy_wrap_mj")) / 1000.0 if counted else None,
        energy_j_from_power=_mean(totals) * duration if totals else None,
        sm_mhz_mean=_mean(values("sm_mhz")),
        sm_mhz_min=min(values("sm_mhz"), default=None),
        mem_mhz_mean=_mean(values("mem_mhz")),
        temp_c_max=max(values("temp_c"), default=None),
        util_pct_mean=_mean(values("util_pct")),
        mem_used_mib_max=max(values("mem_used_mib"), default=None),
        throttle_pct={name: count / len(samples) * 100 for name, count in active.items()} if samples else {},
        samples_lost=int(document.get("samples_lost") or 0),
        sample_error=document.get("sample_error"),
    )


def _counted_mj(start: list[float], stop: list[float], wrap: list[float] | None) -> float:
    """The counters' difference, summed; a counter that wrapped (RAPL's, every few hours at most)
    counts from its range."""
    total = 0.0
    for index, (a, b) in enumerate(zip(start, stop, strict=True)):
        total += b - a if b >= a or not wrap else b + wrap[index] - a
    return total


def _weighted(parts: list[Telemetry], attribute: str) -> float | None:
    pairs = [(getattr(p, attribute), p.samples) for p in parts if getattr(p, attribute) is not None and p.samples]
    weight = sum(n for _, n in pairs)
    return sum(v * n for v, n in pairs) / weight if weight else None


def _extreme(parts: list[Telemetry], attribute: str, pick) -> float | None:
    found = [getattr(p, attribute) for p in parts if getattr(p, attribute) is not None]
    return pick(found) if found else None


def _total(parts: list[Telemetry], attribute: str) -> float | None:
    found = [getattr(p, attribute) for p in parts]
    return None if not found or None in found else sum(found)


def telemetry_of(documents: list[dict[str, Any] | None]) -> Telemetry | None:
    """The level's telemetry from its runs' documents; None where telemetry was off."""
    parts = [_one(d) for d in documents if d is not None]
    if not parts:
        return None
    measured = [p for p in parts if p.source]
    if len(measured) < len(parts):
        if not measured:
            return parts[0].model_copy(update={"runs": len(parts)})
        parts = measured  # a run without (a sampler that failed) is left out; the run count says so
    samples = sum(p.samples for p in parts)
    throttle = {
        name: sum(p.throttle_pct.get(name, 0.0) * p.samples for p in parts) / samples
        for name in {n for p in parts for n in p.throttle_pct}
    }
    return Telemetry(
        source=parts[0].source,
        devices=parts[0].devices,
        interval_s=parts[0].interval_s,
        runs=len(parts),
        duration_s=sum(p.duration_s for p in parts),
        samples=samples,
        power_w_mean=_weighted(parts, "power_w_mean"),
        power_w_peak=_extreme(parts, "power_w_peak", max),
        energy_j=_total(parts, "energy_j"),
        energy_j_from_power=_total(parts, "energy_j_from_power"),
        sm_mhz_mean=_weighted(parts, "sm_mhz_mean"),
        sm_mhz_min=_extreme(parts, "sm_mhz_min", min),
        mem_mhz_mean=_weighted(parts, "mem_mhz_mean"),
        temp_c_max=_extreme(parts, "temp_c_max", max),
        util_pct_mean=_weighted(parts, "util_pct_mean"),
        samples_lost=sum(p.samples_lost for p in parts),
        sample_error=next((p.sample_error for p in parts if p.sample_error), None),
        mem_used_mib_max=_extreme(parts, "mem_used_mib_max", max),
        throttle_pct=throttle if samples else {},
    )
