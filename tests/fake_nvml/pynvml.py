"""A deliberate fake of NVIDIA's `pynvml` (nvidia-ml-py) for hosts without an NVIDIA GPU: the
point of the tests that put this folder on PYTHONPATH is the telemetry's arithmetic and its
sampling window, which need a board whose readings are known.

Two GPUs drawing a constant 300 W and 350 W; their energy counters advance exactly by that power
from this module's import (so a correct sampler's mean power x time equals the counter); GPU 1
reports the software power cap (0x4) as its clock-event reason when $FAKE_NVML_THROTTLE is set.
Every power reading's time (time.perf_counter) is appended to $FAKE_NVML_LOG when it is set.
"""

import os
import time
from types import SimpleNamespace

NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_TEMPERATURE_GPU = 0
WATTS = (300.0, 350.0)
_LOADED = time.perf_counter()
CALLS = []  # power readings' times, for in-process tests


def nvmlInit():
    pass


def nvmlShutdown():
    pass


def nvmlDeviceGetCount():
    return len(WATTS)


def nvmlDeviceGetHandleByIndex(index):
    return index


def nvmlDeviceGetName(handle):
    return b"Fake H200"


def nvmlDeviceGetPowerUsage(handle):
    now = time.perf_counter()
    CALLS.append(now)
    if os.environ.get("FAKE_NVML_LOG"):
        with open(os.environ["FAKE_NVML_LOG"], "a") as log:
            log.write(f"{now}\n")
    return int(WATTS[handle] * 1000)  # mW


def nvmlDeviceGetTotalEnergyConsumption(handle):
    return int(WATTS[handle] * (time.perf_counter() - _LOADED) * 1000)  # mJ


def nvmlDeviceGetClockInfo(handle, clock):
    return 1980 if clock == NVML_CLOCK_SM else 3201


def nvmlDeviceGetTemperature(handle, sensor):
    return 40 + handle


def nvmlDeviceGetUtilizationRates(handle):
    return SimpleNamespace(gpu=90, memory=40)


def nvmlDeviceGetMemoryInfo(handle):
    return SimpleNamespace(used=(10 + handle) << 30, total=141 << 30)


def nvmlDeviceGetCurrentClocksEventReasons(handle):
    return 0x4 if handle == 1 and os.environ.get("FAKE_NVML_THROTTLE") else 0x0
