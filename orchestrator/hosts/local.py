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


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


class LocalHost(Host):
    name = "localhost"

    def _exec(self, command: str, timeout_s: float | None) -> CommandResult:
        """Run in a process group of its own, tied to our life: on a timeout, a Ctrl-C or any
        error the whole group is killed, and a watchdog kills it within a second if we are
        SIGKILLed (a `torchrun` and its ranks must not outlive a dead controller). A server
        started by `start_detached` is in another group and is not touched."""
        process = subprocess.Popen(["bash", "-c", command], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   stdin=subprocess.DEVNULL, text=True, errors="replace", process_group=0)
        watchdog = subprocess.Popen(
            ["sh", "-c", f"while kill -0 {os.getpid()} 2>/dev/null; do sleep 1; done;"
                         f" kill -9 -{process.pid} 2>/dev/null"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        try:
            stdout, stderr = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(process.pid)
            stdout, _ = process.communicate()
            return CommandResult(command, 124, stdout or "", f"timed out after {timeout_s} s")
        except BaseException:
            _kill_group(process.pid)
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
