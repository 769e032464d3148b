"""One long-lived remote shell per SSH connection: a command costs a round trip, not a session.

Every SSH session channel makes sshd fork and start the user's login shell, and on many hosts
that shell sources rc files even for `ssh host cmd` (Debian's bash does when it sees SSH; conda
and pyenv hooks are common): measured here, ~110 ms a command. Instead one `sh` lives as long
as the connection (bash without rc files, else sh); each command is eval'd in a subshell with stdin from /dev/null (so it cannot eat
the next command), then a random marker with the exit code on stdout and the same marker on
stderr end it. Both streams are in order, so once both markers arrived the command is done.
"""

from __future__ import annotations

import contextlib
import secrets
import shlex
import time
from collections.abc import Callable

import paramiko

CHUNK_BYTES = 1 << 20
# A command's children die with our connection, as a local command's die with the controller
# (orchestrator/hosts/local.py): without a terminal, sshd sends no hangup when the connection
# drops (the controller was killed, the network went), and this shell would wait for the command
# to end on its own, a `torchrun` and its ranks holding GPUs and a port meanwhile. The watchdog
# polls the shell's parent, sshd's process for our connection, which exits when the connection
# does; it then kills the command's whole tree, by parentage (torchrun puts ranks in sessions of
# their own). `$PPID` is the shell's parent in subshells too; `ps -p`, not `kill -0`, as sshd
# may run as another user.
PARENT_DEATH = (
    '( tree() { for c in $(ps -o pid= --ppid "$1"); do tree "$c"; done; echo "$1"; };'
    " while ps -p $PPID >/dev/null 2>&1 && kill -0 $__c 2>/dev/null; do sleep 1; done;"
    " kill -0 $__c 2>/dev/null && kill -9 $(tree $__c) ) </dev/null >/dev/null 2>&1 &"
)


def _show_lines(stderr: bytearray, shown: int, marker_at: int, on_line: Callable[[str], None]) -> int:
    """Pass the complete lines of ``stderr`` after ``shown`` (and before the end marker, once it
    came) to ``on_line``; returns how far that got. A partial last line waits for its newline."""
    end = marker_at if marker_at >= 0 else stderr.rfind(b"\n")
    if end <= shown:
        return shown
    text = bytes(stderr[shown:end]).decode(errors="replace")
    for line in text.removesuffix("\n").split("\n"):
        with contextlib.suppress(Exception):  # a progress display never breaks the command
            on_line(line)
    return end + 1


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

    def run(
        self, command: str, timeout_s: float | None, on_stderr_line: Callable[[str], None] | None = None
    ) -> tuple[int, str, str]:
        marker = secrets.token_hex(12)
        # eval of a quoted string in a subshell: a syntax error, `exit` or `cd` in the command
        # ends or changes only that subshell, never the shell that serves the next command. It
        # runs beside a watchdog tied to our connection (see PARENT_DEATH).
        script = (
            f"( eval {shlex.quote(command)} ) </dev/null & __c=$!; {PARENT_DEATH} __w=$!;"
            f" wait $__c; __rc=$?; kill $__w 2>/dev/null;"
            f" printf '\\n%s %s\\n' {marker} $__rc; printf '\\n%s\\n' {marker} >&2\n"
        )
        self.channel.sendall(script.encode())
        out_end = f"\n{marker} ".encode()
        err_end = f"\n{marker}\n".encode()
        stdout, stderr = bytearray(), bytearray()
        out_at = err_at = -1
        shown = 0  # stderr up to here went to on_stderr_line
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
                if on_stderr_line is not None:
                    shown = _show_lines(stderr, shown, err_at, on_stderr_line)
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
