"""This machine as the host: subprocess for commands, file copies for transfers."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO

import httpx

from orchestrator.hosts.base import CommandResult, Host

# Kills a command's whole tree once the controller is gone. By parentage, not only by process
# group: torchrun starts each rank in a session of its own, out of the command's group.
WATCHDOG = """
tree() { for child in $(ps -o pid= --ppid "$1"); do tree "$child"; done; echo "$1"; }
while kill -0 CONTROLLER 2>/dev/null; do sleep 1; done
kill -9 $(tree COMMAND) 2>/dev/null; kill -9 -COMMAND 2>/dev/null
"""


def _kill_tree(pid: int) -> None:
    """SIGKILL ``pid``, every descendant (found before any dies: orphans lose their parentage)
    and its process group."""
    table = subprocess.run(["ps", "-eo", "pid=,ppid="], capture_output=True, text=True).stdout
    children: dict[int, list[int]] = {}
    for line in table.splitlines():
        child, parent = (int(part) for part in line.split())
        children.setdefault(parent, []).append(child)
    tree, frontier = [], [pid]
    while frontier:
        current = frontier.pop()
        tree.append(current)
        frontier.extend(children.get(current, []))
    for member in tree:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(member, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _read_lines(stream: IO[str], into: list[str], on_line: Callable[[str], None] | None) -> None:
    for line in stream:
        into.append(line)
        if on_line is not None:
            with contextlib.suppress(Exception):  # a progress display never breaks the command
                on_line(line.rstrip("\n"))


class LocalHost(Host):
    name = "localhost"

    def _exec(
        self, command: str, timeout_s: float | None, on_stderr_line: Callable[[str], None] | None = None
    ) -> CommandResult:
        """Run tied to our life: on a timeout, a Ctrl-C or any error the command's whole tree is
        killed, and a watchdog kills it within a second if we are SIGKILLed (a `torchrun` and
        its ranks must not outlive a dead controller). A server started by `start_detached` has
        left the tree by then (its launcher exits at once) and is not touched. Both pipes are
        drained by threads (stderr a line at a time, for ``on_stderr_line``), so neither can fill
        and stall the command."""
        process = subprocess.Popen(
            ["bash", "-c", command],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            process_group=0,
        )
        script = WATCHDOG.replace("CONTROLLER", str(os.getpid())).replace("COMMAND", str(process.pid))
        watchdog = subprocess.Popen(
            ["sh", "-c", script],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        stdout: list[str] = []
        stderr: list[str] = []
        readers = [
            threading.Thread(target=lambda: stdout.append(process.stdout.read()), daemon=True),  # type: ignore[union-attr]
            threading.Thread(target=_read_lines, args=(process.stderr, stderr, on_stderr_line), daemon=True),
        ]
        for reader in readers:
            reader.start()
        try:
            process.wait(timeout=timeout_s)
            for reader in readers:
                reader.join()
        except subprocess.TimeoutExpired:
            _kill_tree(process.pid)
            process.wait()
            for reader in readers:
                reader.join(timeout=5)
            return CommandResult(command, 124, "".join(stdout), f"timed out after {timeout_s} s")
        except BaseException:
            _kill_tree(process.pid)
            process.wait()
            raise
        finally:
            watchdog.kill()
            watchdog.wait()
        return CommandResult(command, process.returncode, "".join(stdout), "".join(stderr))

    def http_get(self, port: int, path: str, timeout_s: float = 5) -> tuple[int, str]:
        return self._http("GET", port, path, timeout_s)

    def http_post(self, port: int, path: str, timeout_s: float = 5) -> tuple[int, str]:
        return self._http("POST", port, path, timeout_s)

    def _http(self, method: str, port: int, path: str, timeout_s: float) -> tuple[int, str]:
        try:
            response = httpx.request(method, f"http://127.0.0.1:{int(port)}{path}", timeout=timeout_s)
        except httpx.HTTPError:
            return 0, ""
        return response.status_code, response.text

    def put(self, local_path: Path, remote_path: str) -> None:
        target = Path(remote_path).expanduser()
        target.parent.mkdir(parents=True, exist_ok=True)
        if Path(local_path).resolve() != target.resolve():
            shutil.copyfile(local_path, target)

    def get(self, remote_path: str, local_path: Path, progress: Callable[[int, int], None] | None = None) -> None:
        source = Path(remote_path).expanduser()
        self.put(source, str(local_path))
        if progress is not None:  # one local copy: seconds even for GBs, so said once, done
            size = source.stat().st_size
            progress(size, size)
