"""One long-lived remote shell per SSH connection: a command costs a round trip, not a session.

Every SSH session channel makes sshd fork and start the user's login shell, and on many hosts
that shell sources rc files even for `ssh host cmd` (Debian's bash does when it sees SSH; conda
and pyenv hooks are common): measured here, ~110 ms a command. Instead one `sh` lives as long
as the connection (bash without rc files, else sh); each command is eval'd in a subshell with stdin from /dev/null (so it cannot eat
the next command), then a random marker with the exit code on stdout and the same marker on
stderr end it. Both streams are in order, so once both markers arrived the command is done.
"""

from __future__ import annotations

import secrets
import shlex
import time

import paramiko

CHUNK_BYTES = 1 << 20


class ShellTimeout(Exception):
    """The command outlived its timeout; the shell is left in an unknown state."""


class RemoteShell:
    def __init__(self, transport: paramiko.Transport) -> None:
        self.channel = transport.open_session()
        # bash without rc files where there is one (users' command tasks may use bash syntax).
        self.channel.exec_command("command -v bash >/dev/null 2>&1 && exec bash --noprofile --norc; exec sh")

    @property
    def alive(self) -> bool:
        return not self.channel.closed and not self.channel.exit_status_ready()

    def close(self) -> None:
        self.channel.close()

    def run(self, command: str, timeout_s: float | None) -> tuple[int, str, str]:
        marker = secrets.token_hex(12)
        # eval of a quoted string in a subshell: a syntax error, `exit` or `cd` in the command
        # ends or changes only that subshell, never the shell that serves the next command.
        script = (f"( eval {shlex.quote(command)} ) </dev/null; printf '\\n%s %s\\n' {marker} $?;"
                  f" printf '\\n%s\\n' {marker} >&2\n")
        self.channel.sendall(script.encode())
        out_end = f"\n{marker} ".encode()
        err_end = f"\n{marker}\n".encode()
        stdout, stderr = bytearray(), bytearray()
        out_at = err_at = -1
        deadline = time.monotonic() + timeout_s if timeout_s else None
        idle_s = 0.0002  # polls back off while a long command runs, stay quick for short ones
        while out_at < 0 or err_at < 0 or stdout.find(b"\n", out_at + len(out_end)) < 0:
            progressed = False
            while self.channel.recv_ready():
                data = self.channel.recv(CHUNK_BYTES)
                if not data:
                    break
                stdout += data
                progressed = True
            while self.channel.recv_stderr_ready():
                stderr += self.channel.recv_stderr(CHUNK_BYTES)
                progressed = True
            if progressed:
                out_at = stdout.find(out_end) if out_at < 0 else out_at
                err_at = stderr.find(err_end) if err_at < 0 else err_at
                idle_s = 0.0002
                continue
            if self.channel.closed or self.channel.eof_received or self.channel.exit_status_ready():
                raise EOFError("the remote shell ended before the command finished")
            if deadline and time.monotonic() > deadline:
                raise ShellTimeout(stdout.decode(errors="replace"))
            time.sleep(idle_s)
            idle_s = min(idle_s * 1.5, 0.02)
        line_end = stdout.find(b"\n", out_at + len(out_end))
        code = int(stdout[out_at + len(out_end) : line_end])
        return (code, stdout[:out_at].decode(errors="replace"), stderr[:err_at].decode(errors="replace"))
