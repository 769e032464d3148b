"""The telemetry's own check on a GPU host: the board's energy counter against mean sampled power x
time, idle and under a bf16 matmul load, at the sampling interval the campaign uses.

usage: python benchmarks/telemetry_check.py [--seconds 20] [--interval-s 0.1]

Prints, for each phase: samples, mean / peak W, SM MHz mean / min, max temperature, the energy
counter's difference, mean power x time, and how far apart the two are (the issue asks for 5% at
most), and any throttle reason other than idle. On a host without NVML (this CPU machine) it says
why nothing was measured and exits 0.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tasks.macro.energy import telemetry_of  # noqa: E402


def host_module():
    spec = importlib.util.spec_from_file_location(
        "host_telemetry", ROOT / "tasks" / "macro" / "remote" / "telemetry.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def phase(telemetry, source, interval_s: float, seconds: float, work) -> dict:
    sampler = telemetry.Sampler(source, interval_s)
    sampler.start()
    ends = time.perf_counter() + seconds
    while time.perf_counter() < ends:
        work()
    return sampler.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--interval-s", type=float, default=0.1)
    args = parser.parse_args()
    telemetry = host_module()
    source, why = telemetry.open_source()
    if source is None or source.name != "nvml":
        print(f"no GPU telemetry on this host: {why or 'only ' + source.name}; nothing to check")
        return
    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)

    def matmul() -> None:
        for _ in range(20):
            a @ a
        torch.cuda.synchronize()

    phases = {
        "idle": phase(telemetry, source, args.interval_s, args.seconds, lambda: time.sleep(0.01)),
        "bf16 matmul 8192^3": phase(telemetry, source, args.interval_s, args.seconds, matmul),
    }
    print(f"# benchmarks/telemetry_check.py --seconds {args.seconds:g} --interval-s {args.interval_s:g}")
    print(f"# devices: {', '.join(source.devices())}")
    print(
        "| phase | samples | mean / peak W | SM MHz mean / min | max °C | counter J | mean W x time J | apart | throttled |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, document in phases.items():
        t = telemetry_of([document])
        apart = (t.energy_j_from_power / t.energy_j - 1) * 100 if t.energy_j and t.energy_j_from_power else None
        print(
            f"| {name} | {t.samples} | {t.power_w_mean:.1f} / {t.power_w_peak:.1f} | {t.sm_mhz_mean:.0f} /"
            f" {t.sm_mhz_min:.0f} | {t.temp_c_max:.0f} | {t.energy_j if t.energy_j is not None else float('nan'):.1f}"
            f" | {t.energy_j_from_power:.1f} | {'n/a' if apart is None else f'{apart:+.2f}%'} |"
            f" {', '.join(f'{k} {v:.0f}%' for k, v in t.slowdowns.items()) or 'none'} |"
        )
    source.close()


if __name__ == "__main__":
    main()
