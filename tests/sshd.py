"""A real OpenSSH server on a loopback port, with generated host and user keys.

Used by the SSH tests (fabric's habit: integration against a real sshd). It never touches the
developer's ~/.ssh: keys, known_hosts and authorized_keys live in a temp folder.
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def keygen(path: Path, kind: str = "ed25519") -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-f", str(path)], check=True)


def sshd_config(listen: str, port: int, host_key: Path, folder: Path) -> str:
    """Keys only, no PAM, sftp for file copies, room for the many channels a campaign opens."""
    return (
        f"Port {port}\nListenAddress {listen}\nHostKey {host_key}\n"
        f"PidFile {folder}/sshd.pid\nAuthorizedKeysFile {folder}/authorized_keys\n"
        "StrictModes no\nUsePAM no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "PermitRootLogin prohibit-password\nSubsystem sftp internal-sftp\nMaxStartups 100\n"
        "MaxSessions 100\nClientAliveInterval 5\n"
    )


@dataclass
class Sshd:
    folder: Path
    port: int
    user: str
    process: subprocess.Popen | None = None

    @property
    def host_key(self) -> Path:
        return self.folder / "ssh_host_ed25519_key"

    @property
    def client_key(self) -> Path:
        return self.folder / "client_key"

    @property
    def known_hosts(self) -> Path:
        return self.folder / "known_hosts"

    def setup(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        os.chmod(self.folder, 0o700)
        keygen(self.host_key)
        keygen(self.client_key)
        (self.folder / "authorized_keys").write_text((self.folder / "client_key.pub").read_text())
        self.trust_current_host_key()
        (self.folder / "sshd_config").write_text(sshd_config("127.0.0.1", self.port, self.host_key, self.folder))
        Path("/run/sshd").mkdir(exist_ok=True) if os.geteuid() == 0 else None

    def trust_current_host_key(self) -> None:
        public = (self.folder / "ssh_host_ed25519_key.pub").read_text().split()
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {public[0]} {public[1]}\n")

    def start(self) -> None:
        self.process = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(self.folder / "sshd_config")],
            stdout=subprocess.DEVNULL,
            stderr=open(self.folder / "sshd.log", "ab"),
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"sshd did not start; see {self.folder}/sshd.log")

    def stop(self) -> None:
        """Stop the listener and every session it serves (their connections drop)."""
        if self.process is None:
            return
        subprocess.run(["pkill", "-KILL", "-P", str(self.process.pid)], check=False)
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        self.process = None

    def kill_sessions(self) -> None:
        """Drop every live connection but keep the listener: a network blip."""
        subprocess.run(["pkill", "-KILL", "-P", str(self.process.pid)], check=False)

    def config_toml(self, workdir: Path, python: str) -> str:
        return (
            '[host]\nkind = "ssh"\nhostname = "127.0.0.1"\n'
            f'port = {self.port}\nuser = "{self.user}"\nidentity_file = "{self.client_key}"\n'
            f'known_hosts = "{self.known_hosts}"\nssh_config = "{self.folder}/no_ssh_config"\n'
            f'workdir = "{workdir}"\npython = "{python}"\n'
        )


def start_sshd(folder: Path) -> Sshd:
    server = Sshd(folder=folder, port=free_port(), user=getpass.getuser())
    server.setup()
    server.start()
    return server
