"""SSH command round trip: one reused paramiko connection against a fresh `ssh` process per
command, on a real loopback sshd (tests/sshd.py), side by side in one run.
usage: python benchmarks/ssh_round_trip.py [--n 50]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from sshd import start_sshd  # noqa: E402

from orchestrator.hosts.ssh import SSHHost, SSHTarget  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        server = start_sshd(Path(folder) / "sshd")
        try:
            host = SSHHost(
                SSHTarget(
                    alias="bench",
                    hostname="127.0.0.1",
                    port=server.port,
                    user=server.user,
                    identity_files=[str(server.client_key)],
                    known_hosts=str(server.known_hosts),
                    ssh_config=None,
                )
            )
            host.run("true")  # connect once
            reused = []
            for _ in range(args.n):
                started = time.perf_counter()
                host.run("true")
                reused.append((time.perf_counter() - started) * 1000)
            fresh = []
            command = [
                "ssh",
                "-q",
                "-F",
                "/dev/null",
                "-p",
                str(server.port),
                "-i",
                str(server.client_key),
                "-o",
                f"UserKnownHostsFile={server.known_hosts}",
                "-o",
                "StrictHostKeyChecking=yes",
                "-o",
                "BatchMode=yes",
                f"{server.user}@127.0.0.1",
                "true",
            ]
            for _ in range(args.n):
                started = time.perf_counter()
                subprocess.run(command, check=True)
                fresh.append((time.perf_counter() - started) * 1000)
            host.close()
        finally:
            server.stop()
    print(f"{'way':34} {'median ms':>10} {'p90 ms':>8}  (n={args.n})")
    for label, values in (("reused paramiko connection", reused), ("fresh ssh process per command", fresh)):
        ordered = sorted(values)
        print(f"{label:34} {statistics.median(values):10.2f} {ordered[int(0.9 * (len(ordered) - 1))]:8.2f}")
    print(f"ratio: {statistics.median(fresh) / statistics.median(reused):.1f}x (target >= 10x)")


if __name__ == "__main__":
    main()
