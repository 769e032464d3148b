"""This machine as the host: subprocess for commands, file copies for transfers."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from pathlib import Path

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


class LocalHost(Host):
    name = "localhost"

    def _exec(self, command: str, timeout_s: float | None) -> CommandResult:
        """Run tied to our life: on a timeout, a Ctrl-C or any error the command's whole tree is
        killed, and a watchdog kills it within a second if we are SIGKILLed (a `torchrun` and
        its ranks must not outlive a dead controller). A server started by `start_detached` has
        left the tree by then (its launcher exits at once) and is not touched."""
        process = subprocess.Popen(["bash", "-c", command], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   stdin=subprocess.DEVNULL, text=True, errors="replace", process_group=0)
        script = WATCHDOG.replace("CONTROLLER", str(os.getpid())).replace("COMMAND", str(process.pid))
        watchdog = subprocess.Popen(
            ["sh", "-c", script],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        try:
            stdout, stderr = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_tree(process.pid)
            stdout, _ = process.communicate()
            return CommandResult(command, 124, stdout or "", f"timed out after {timeout_s} s")
        except BaseException:
            _kill_tree(process.pid)
            process.wait()
            raise
        finally:
            watchdog.kill()
            watchdog.wait()
        return CommandResult(command, process.returncode, stdout, stderr)

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

    def get(self, remote_path: str, local_path: Path) -> None:
        self.put(Path(remote_path).expanduser(), str(local_path))
