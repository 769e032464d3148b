"""GPU telemetry: the sampler samples only inside a run and stops with it, the load client records
it from NVML, the findings turn it into power, joules a request and output tokens a joule, and a
host with nothing to read says so instead of printing zeros.

NVML is the fake in tests/fake_nvml/pynvml.py (on purpose: this machine has no NVIDIA GPU, and
the arithmetic needs a board of known power: 300 W + 350 W, energy counters that advance by
exactly that). The server is the known-pace fake (tests/pace_server.py), adopted by a real
campaign of the serving phase.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import run_cli
from test_serving_paced import paced_campaign

from orchestrator.statefile import load_state
from tasks.macro.energy import telemetry_of

ROOT = Path(__file__).resolve().parent.parent
REMOTE = ROOT / "tasks" / "macro" / "remote"
FAKE = Path(__file__).resolve().parent / "fake_nvml"


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_sampler_samples_only_between_start_and_stop_and_its_thread_ends() -> None:
    telemetry = load(REMOTE / "telemetry.py", "host_telemetry")
    fake = load(FAKE / "pynvml.py", "fake_pynvml")
    sampler = telemetry.Sampler(telemetry.NvmlSource(fake), interval_s=0.05)
    before = time.perf_counter()
    sampler.start()
    time.sleep(0.3)
    document = sampler.stop()
    after = time.perf_counter()
    assert not sampler.thread.is_alive()
    calls = list(fake.CALLS)
    assert calls and all(before <= t <= after for t in calls)
    time.sleep(0.2)
    assert fake.CALLS == calls  # nothing sampled once the level is over
    assert 5 <= len(document["samples"]) <= 8  # 0.3 s at 0.05 s, the first at once
    assert all(0 <= t <= document["duration_s"] for t, _ in document["samples"])
    summary = telemetry_of([document])
    assert summary.power_w_mean == pytest.approx(650.0) and summary.power_w_peak == pytest.approx(650.0)
    assert summary.energy_j == pytest.approx(650.0 * document["duration_s"], rel=0.02)
    assert summary.sm_mhz_min == 1980 and summary.temp_c_max == 41 and summary.mem_used_mib_max == 11 * 1024
    assert summary.slowdowns == {}


def test_nothing_to_read_is_said_not_zeroed() -> None:
    """This machine: no pynvml in the host's Python, no readable RAPL counter."""
    out = subprocess.run(
        [sys.executable, str(REMOTE / "telemetry.py"), "--interval-s", "0.05"],
        input="stop\n",
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    document = json.loads(out.stdout.splitlines()[-1])
    if importlib.util.find_spec("pynvml") is not None or Path("/sys/class/powercap/intel-rapl:0").exists():
        pytest.skip("this host has a telemetry source")
    assert document["source"] is None and "NVML" in document["why"] and "RAPL" in document["why"]
    summary = telemetry_of([document, document])
    assert summary.source is None and summary.power_w_mean is None and summary.energy == (None, "not measured")


def test_a_campaign_reports_power_energy_and_throttling(tmp_path: Path, pace_server) -> None:
    write_config = paced_campaign(tmp_path, pace_server(ttft_ms=5, pace_ms=4))
    write_config(24, "repeats = 2\ntelemetry_interval_s = 0.02\n")
    env = {**os.environ, "PYTHONPATH": f"{FAKE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    result = run_cli(["resume"], tmp_path, timeout=300, env=env | {"FAKE_NVML_THROTTLE": "1"})
    assert result.returncode == 0, result.stderr
    todos = load_state(tmp_path / "state" / "todo.json").by_id()
    level = todos["macro_sweep"].result["levels"][-1]
    power = level["telemetry"]
    assert power["source"] == "nvml" and power["runs"] == 2 and power["devices"] == ["Fake H200"] * 2
    assert power["power_w_mean"] == pytest.approx(650.0)
    # the counters' difference against mean power x time, over both runs: the sampling's own check
    assert power["energy_j"] == pytest.approx(power["energy_j_from_power"], rel=0.05)
    assert power["throttle_pct"]["sw_power_cap"] == pytest.approx(100.0)
    findings = (tmp_path / "reports" / "paced" / "findings.md").read_text()
    row = next(line for line in findings.splitlines() if line.startswith(f"| c={level['concurrency']} | 650.0"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    energy = float(cells[2].split()[0])
    assert energy == pytest.approx(power["energy_j"], abs=0.1)
    assert float(cells[4]) == pytest.approx(energy / level["completed"], abs=0.01)
    assert float(cells[5]) == pytest.approx(level["output_tokens"] / energy, abs=0.01)
    assert "sw_power_cap 100%" in cells[9]
    assert re.search(r"\*\*Throttled runs\*\*: single stream: sw_power_cap", findings)
    assert (tmp_path / "reports" / "paced" / "power.png").is_file()


def test_the_findings_of_a_host_without_telemetry_say_nothing_was_measured(tmp_path: Path, pace_server) -> None:
    write_config = paced_campaign(tmp_path, pace_server(ttft_ms=5, pace_ms=2))
    write_config(8)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = run_cli(["resume"], tmp_path, timeout=300, env=env)
    assert result.returncode == 0, result.stderr
    if importlib.util.find_spec("pynvml") is not None or Path("/sys/class/powercap/intel-rapl:0").exists():
        pytest.skip("this host has a telemetry source")
    findings = (tmp_path / "reports" / "paced" / "findings.md").read_text()
    assert "**Energy**: nothing measured on this host (NVML:" in findings
    assert "output tokens a J" not in findings


def test_check_says_what_the_telemetry_will_read(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(FAKE)}
    found = run_cli(["--state", str(tmp_path / "todo.json"), "check"], tmp_path, timeout=120, env=env)
    line = next(line for line in found.stdout.splitlines() if "macro.telemetry_interval_s" in line)
    assert "NVML: 2 GPU(s) (Fake H200): power and energy sampled" in line
    (tmp_path / "campaign.toml").write_text("[macro]\ntelemetry_interval_s = 0\n")
    off = run_cli(["--state", str(tmp_path / "todo.json"), "check"], tmp_path, timeout=120, env=env)
    assert "0: no power telemetry sampled" in off.stdout


@pytest.mark.parametrize(("first_uj", "range_uj"), [(1_000_000, 262_143_328_850), (262_141_328_850, 262_143_328_850)])
def test_rapl_package_energy_from_its_counter_across_a_wrap(tmp_path: Path, first_uj: int, range_uj: int) -> None:
    """A CPU host's RAPL package zone (a fake powercap folder: the files the kernel exposes): 5 J
    used between start and stop, read from the counter, also when it wrapped to 0 on the way."""
    telemetry = load(REMOTE / "telemetry.py", "host_telemetry_rapl")
    zone = tmp_path / "intel-rapl:0"
    (tmp_path / "intel-rapl:0:0").mkdir(parents=True)  # a sub-zone (core): not a package, left out
    zone.mkdir()
    (zone / "name").write_text("package-0\n")
    (zone / "max_energy_range_uj").write_text(f"{range_uj}\n")
    (zone / "energy_uj").write_text(f"{first_uj}\n")
    source = telemetry.RaplSource(root=str(tmp_path))
    assert source.devices() == ["package-0"]
    sampler = telemetry.Sampler(source, interval_s=10.0)
    sampler.start()
    # as sysfs reads do, the sampler sees the old value or the new one, never half a write
    (zone / "energy_uj.new").write_text(f"{(first_uj + 5_000_000) % range_uj}\n")
    (zone / "energy_uj.new").replace(zone / "energy_uj")
    document = sampler.stop()
    summary = telemetry_of([document])
    assert summary.source == "rapl" and summary.energy_j == pytest.approx(5.0)


def test_an_unreadable_sample_is_skipped_and_counted_and_the_sampler_goes_on() -> None:
    """A fault injected into the source (its second read raises, as a half-written file would):
    the sampler's thread does not die with it; the sample is left out and counted, and the
    samples after it are kept."""
    telemetry = load(REMOTE / "telemetry.py", "host_telemetry_flaky")

    class Flaky:
        name = "flaky"
        reads = 0

        def devices(self):
            return ["d0"]

        def energy_mj(self):
            return [0.0]

        def sample(self):
            self.reads += 1
            if self.reads == 2:
                raise ValueError("invalid literal for int() with base 10: ''")
            return [[100.0, None, None, None, None, None, None]]

    source = Flaky()
    sampler = telemetry.Sampler(source, interval_s=0.01)
    sampler.start()
    deadline = time.perf_counter() + 5
    while source.reads < 5 and time.perf_counter() < deadline:
        time.sleep(0.01)
    document = sampler.stop()
    assert document["samples_lost"] == 1 and "invalid literal" in document["sample_error"]
    assert len(document["samples"]) >= 3 and not sampler.thread.is_alive()
    from tasks.macro.energy import telemetry_of

    summary = telemetry_of([document, document])
    assert summary.samples_lost == 2 and summary.samples == 2 * len(document["samples"])
    assert summary.sample_error.startswith("ValueError: invalid literal")
