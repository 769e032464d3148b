"""A remote host over SSH with paramiko: one reused connection, verified host keys.

- `~/.ssh/config` is honoured through paramiko's SSHConfig (Host alias, HostName, User, Port,
  IdentityFile, ProxyJump with one hop).
- Host keys are checked against known_hosts; an unknown or changed key is refused with the
  fingerprint and how to trust it deliberately. Nothing is ever auto-added.
- A dropped connection is re-made with the `reconnect` retry policy, so a campaign survives
  an sshd restart or a network blip.
- Downloads are resumable: a `.part` file grows until it matches the remote size.
"""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import paramiko

from orchestrator.errors import ConnectionLost, HostError, HostKeyError
from orchestrator.hosts.base import CommandResult, Host
from orchestrator.hosts.remote_shell import RemoteShell, ShellTimeout
from orchestrator.retry import reconnect_policy

CHUNK_BYTES = 1 << 20


@dataclass
class SSHTarget:
    """Where to connect, after `~/.ssh/config` has been applied."""

    alias: str
    hostname: str
    port: int = 22
    user: str | None = None
    identity_files: list[str] = field(default_factory=list)
    proxy_jump: str | None = None
    known_hosts: str = "~/.ssh/known_hosts"
    ssh_config: str | None = "~/.ssh/config"
    connect_timeout_s: float = 15
    keepalive_s: int = 15


def resolve_target(target: SSHTarget) -> SSHTarget:
    """Fill hostname/user/port/identity/proxy from the SSH config file when one exists."""
    if not target.ssh_config:
        return target
    path = Path(target.ssh_config).expanduser()
    if not path.exists():
        return target
    looked_up = paramiko.SSHConfig.from_path(str(path)).lookup(target.alias)
    return SSHTarget(
        alias=target.alias,
        hostname=looked_up.get("hostname", target.hostname),
        port=int(looked_up.get("port", target.port)),
        user=looked_up.get("user", target.user),
        identity_files=target.identity_files or list(looked_up.get("identityfile", [])),
        proxy_jump=looked_up.get("proxyjump", target.proxy_jump),
        known_hosts=target.known_hosts,
        ssh_config=target.ssh_config,
        connect_timeout_s=target.connect_timeout_s,
        keepalive_s=target.keepalive_s,
    )


class _RefuseUnknownKey(paramiko.MissingHostKeyPolicy):
    def __init__(self, known_hosts: str, hostname: str, port: int) -> None:
        self.known_hosts, self.hostname, self.port = known_hosts, hostname, port

    def missing_host_key(self, client, hostname, key):  # paramiko's signature
        fingerprint = key.fingerprint  # "SHA256:..."
        raise HostKeyError(
            f"host key of {hostname} ({key.get_name()} {fingerprint}) is not in {self.known_hosts};"
            f" check the fingerprint with the host's owner, then trust it deliberately:"
            f" ssh-keyscan -p {self.port} {self.hostname} >> {self.known_hosts}"
        )


def check_identity_file(identity: str, alias: str) -> None:
    """A file given as the key must be one: a wrong file is refused at once, naming it, instead of
    every connection attempt failing as if the network were down. A passphrase-protected key is
    let through (the agent may hold it)."""
    path = Path(identity).expanduser()
    try:
        paramiko.PKey.from_path(path)
    except paramiko.PasswordRequiredException:
        return
    except FileNotFoundError:
        raise HostError(f"{identity}: no such file (the IdentityFile of '{alias}'); check the path") from None
    except (paramiko.SSHException, ValueError, OSError, UnicodeDecodeError) as err:
        raise HostError(
            f"{identity}: not a private key this can read ({type(err).__name__}: {str(err)[:80]});"
            f" point IdentityFile / host.identity_file of '{alias}' at the private key (not the .pub)"
        ) from None


class SSHHost(Host):
    def __init__(self, target: SSHTarget) -> None:
        self.target = resolve_target(target)
        self.name = self.target.alias
        self._client: paramiko.SSHClient | None = None
        self._jump: SSHHost | None = None
        self._shell: RemoteShell | None = None
        self.connects = 0  # how many connections were made: reuse is measurable

    # -- connection -----------------------------------------------------------------------
    def _connect(self) -> paramiko.SSHClient:
        target = self.target
        client = paramiko.SSHClient()
        known_hosts = str(Path(target.known_hosts).expanduser())
        if os.path.exists(known_hosts):
            client.load_host_keys(known_hosts)
        client.set_missing_host_key_policy(_RefuseUnknownKey(target.known_hosts, target.hostname, target.port))
        for identity in target.identity_files:
            check_identity_file(identity, target.alias)
        sock = None
        if target.proxy_jump:
            self._jump = SSHHost(
                SSHTarget(
                    alias=target.proxy_jump,
                    hostname=target.proxy_jump,
                    known_hosts=target.known_hosts,
                    ssh_config=target.ssh_config,
                )
            )
            sock = (
                self._jump.client()
                .get_transport()
                .open_channel("direct-tcpip", (target.hostname, target.port), ("127.0.0.1", 0))
            )
        try:
            client.connect(
                target.hostname,
                port=target.port,
                username=target.user,
                key_filename=[str(Path(p).expanduser()) for p in target.identity_files] or None,
                timeout=target.connect_timeout_s,
                banner_timeout=target.connect_timeout_s,
                auth_timeout=target.connect_timeout_s,
                look_for_keys=not target.identity_files,
                allow_agent=not target.identity_files,
                sock=sock,
            )
        except paramiko.BadHostKeyException as err:
            raise HostKeyError(
                f"host key of {target.hostname}:{target.port} CHANGED (got {err.key.get_name()}"
                f" {err.key.fingerprint}, {target.known_hosts} expects {err.expected_key.fingerprint});"
                " this may be an attack; if the host was reinstalled, remove the old key with"
                f" `ssh-keygen -R '[{target.hostname}]:{target.port}' -f {target.known_hosts}`"
                " and add the new one after checking it"
            ) from None
        except paramiko.AuthenticationException as err:
            raise HostError(
                f"ssh {target.user or ''}@{target.hostname}:{target.port}: authentication failed"
                f" ({err}); check User/IdentityFile for '{target.alias}'"
            ) from None
        transport = client.get_transport()
        assert transport is not None
        transport.set_keepalive(target.keepalive_s)
        if isinstance(transport.sock, socket.socket):
            # Each command is a few small packets each way; without this, Nagle's algorithm
            # and delayed ACKs add tens of milliseconds to every round trip.
            transport.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.connects += 1
        return client

    def client(self) -> paramiko.SSHClient:
        """The live connection, made on first use and re-made when it has dropped."""
        transport = self._client.get_transport() if self._client else None
        if transport is not None and transport.is_active():
            return self._client  # type: ignore[return-value]
        if self._client is not None:
            self._client.close()
            self._client = None

        def attempt() -> paramiko.SSHClient:
            return self._connect()

        self._client = reconnect_policy(self.name)(attempt)()
        return self._client

    def close(self) -> None:
        self._drop()
        if self._jump is not None:
            self._jump.close()

    # -- commands -------------------------------------------------------------------------
    def _exec(
        self, command: str, timeout_s: float | None, on_stderr_line: Callable[[str], None] | None = None
    ) -> CommandResult:
        shell = self._live_shell()
        try:
            code, stdout, stderr = shell.run(command, timeout_s, on_stderr_line)
        except ShellTimeout as timeout:
            self._drop_shell()
            return CommandResult(command, 124, str(timeout), f"timed out after {timeout_s} s")
        except (paramiko.SSHException, EOFError, OSError) as err:
            # The command may or may not have run: never re-sent here. The runner re-runs
            # the whole (idempotent) task instead.
            self._drop()
            raise ConnectionLost(
                f"ssh {self.name}: connection lost running `{command[:80]}` ({type(err).__name__}: {err})"
            ) from None
        return CommandResult(command, code, stdout, stderr)

    @property
    def connected(self) -> bool:
        """Whether the connection and its shell are known to be alive. A drop is only known once
        paramiko's reader thread has seen it; until then a command sent on the dead connection
        raises ConnectionLost (it may or may not have run)."""
        if self._shell is None or not self._shell.alive or self._client is None:
            return False
        transport = self._client.get_transport()
        return transport is not None and transport.is_active()

    def _live_shell(self) -> RemoteShell:
        """The connection's shell; a connection or shell found dead before the command is re-made."""
        if self.connected:
            return self._shell  # type: ignore[return-value]
        self._drop_shell()
        try:
            self._shell = RemoteShell(self.client().get_transport())  # type: ignore[arg-type]
        except (paramiko.SSHException, EOFError, OSError):
            self._drop()
            self._shell = RemoteShell(self.client().get_transport())  # type: ignore[arg-type]
        return self._shell

    def _drop_shell(self) -> None:
        if self._shell is not None:
            self._shell.close()
            self._shell = None

    def _drop(self) -> None:
        self._drop_shell()
        if self._client is not None:
            self._client.close()
            self._client = None

    # -- files ----------------------------------------------------------------------------
    def _sftp(self) -> paramiko.SFTPClient:
        return self.client().open_sftp()

    def put(self, local_path: Path, remote_path: str) -> None:
        sftp = self._sftp()
        try:
            parent = os.path.dirname(remote_path)
            if parent:
                self.run(["mkdir", "-p", parent], timeout_s=30)
            sftp.put(str(local_path), remote_path)
        finally:
            sftp.close()

    def get(self, remote_path: str, local_path: Path, progress: Callable[[int, int], None] | None = None) -> None:
        """Resumable download: bytes already in ``local_path.part`` are not fetched again."""
        local_path = Path(local_path)
        local_path.parent.mkdir(parents=True, exist_ok=True)
        partial = local_path.with_name(local_path.name + ".part")
        sftp = self._sftp()
        try:
            size = sftp.stat(remote_path).st_size
            if size is None or stat.S_ISDIR(sftp.stat(remote_path).st_mode or 0):
                raise HostError(f"{self.name}:{remote_path} is not a regular file")
            have = partial.stat().st_size if partial.exists() else 0
            if have > size:
                partial.unlink()
                have = 0
            with sftp.open(remote_path, "rb") as remote, open(partial, "ab") as out:
                remote.seek(have)
                remote.prefetch(size - have)
                while have < size:
                    chunk = remote.read(min(CHUNK_BYTES, size - have))
                    if not chunk:
                        break
                    out.write(chunk)
                    have += len(chunk)
                    if progress is not None:
                        progress(have, size)
            if have != size:
                raise HostError(f"{self.name}:{remote_path}: got {have} of {size} bytes; run again to resume")
            os.replace(partial, local_path)
        finally:
            sftp.close()
