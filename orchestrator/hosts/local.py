"""This machine as the host: subprocess for commands, file copies for transfers."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import httpx

from orchestrator.hosts.base import CommandResult, Host


class LocalHost(Host):
    name = "localhost"

    def _exec(self, command: str, timeout_s: float | None) -> CommandResult:
        try:
            done = subprocess.run(
                ["bash", "-c", command], capture_output=True, text=True, timeout=timeout_s,
                errors="replace",
            )
        except subprocess.TimeoutExpired as err:
            stdout = (err.stdout or b"").decode(errors="replace") if isinstance(err.stdout, bytes) else (err.stdout or "")
            return CommandResult(command, 124, stdout, f"timed out after {timeout_s} s")
        return CommandResult(command, done.returncode, done.stdout, done.stderr)

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
