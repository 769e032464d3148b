"""Two "hosts" on this machine: Linux network namespaces on a private bridge, each with its own
sshd, hostname (UTS namespace) and /dev/shm (a private tmpfs in its own mount namespace).

Real parts, not fakes: the nodes are reached over real SSH (known host keys, RejectPolicy), the
ranks meet over real TCP on the bridge, and nothing is shared between them but the filesystem
(each node is given its own workdir) and the CPU. Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN);
callers skip with the reason otherwise. No address outside the private /24 is routed, so no
traffic leaves that subnet.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from sshd import SSHD, keygen, sshd_config


def why_unavailable() -> str | None:
    """None when namespace nodes can be built here, else why not."""
    if os.geteuid() != 0:
        return "namespace nodes need root (CAP_NET_ADMIN to build a bridge and namespaces)"
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return f"namespace nodes need `{tool}` (iproute2 / util-linux)"
    if not Path(SSHD).exists():
        return "sshd is not installed: apt-get install openssh-server"
    probe = f"orchprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot create a network namespace here ({made.stderr.strip()[:120]}): no CAP_NET_ADMIN"
    subprocess.run(["ip", "netns", "delete", probe], capture_output=True)
    return None


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True)


@dataclass
class Node:
    index: int
    namespace: str
    ip: str
    interface: str
    folder: Path
    process: subprocess.Popen | None = None

    @property
    def hostname(self) -> str:
        return f"node{self.index}"

    def processes(self) -> list[str]:
        """`pid command` of every process in the namespace but its sshd listener."""
        pids = subprocess.run(["ip", "netns", "pids", self.namespace], capture_output=True, text=True).stdout.split()
        listing = []
        for pid in pids:
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
                stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if stat != "Z" and "[listener]" not in command and not command.startswith(f"{SSHD} -D"):
                listing.append(f"{pid} {command}")
        return listing


@dataclass
class NamespaceNodes:
    folder: Path
    count: int = 2
    subnet: str = field(default_factory=lambda: f"10.213.{random.randint(64, 250)}")
    nodes: list[Node] = field(default_factory=list)

    @property
    def bridge(self) -> str:
        return f"orbr{os.getpid() % 100000}"

    @property
    def client_key(self) -> Path:
        return self.folder / "client_key"

    @property
    def known_hosts(self) -> Path:
        return self.folder / "known_hosts"

    def start(self) -> NamespaceNodes:
        self.folder.mkdir(parents=True, exist_ok=True)
        keygen(self.client_key)
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        Path("/run/sshd").mkdir(exist_ok=True)
        known = []
        for index in range(self.count):
            node = Node(
                index,
                f"orch{os.getpid()}n{index}",
                f"{self.subnet}.{10 + index}",
                f"eth{index}",
                self.folder / f"node{index}",
            )
            self.nodes.append(node)
            node.folder.mkdir()
            veth = f"orv{os.getpid() % 100000}n{index}"
            sh("ip", "netns", "add", node.namespace)
            sh("ip", "link", "add", veth, "type", "veth", "peer", "name", node.interface, "netns", node.namespace)
            sh("ip", "link", "set", veth, "master", self.bridge, "up")
            sh("ip", "-n", node.namespace, "addr", "add", f"{node.ip}/24", "dev", node.interface)
            sh("ip", "-n", node.namespace, "link", "set", node.interface, "up")
            sh("ip", "-n", node.namespace, "link", "set", "lo", "up")
            known.append(self.start_sshd(node))
        self.known_hosts.write_text("".join(known))
        return self

    def start_sshd(self, node: Node) -> str:
        host_key = node.folder / "ssh_host_ed25519_key"
        keygen(host_key)
        (node.folder / "authorized_keys").write_text((self.folder / "client_key.pub").read_text())
        config = node.folder / "sshd_config"
        config.write_text(sshd_config(node.ip, 22, host_key, node.folder))
        # Its own hostname (resolvable, as on a real host: torchrun's rendezvous publishes it) and
        # its own /dev/shm: what two real hosts never share.
        hosts = node.folder / "hosts"
        hosts.write_text(
            "127.0.0.1 localhost\n"
            + "".join(f"{self.subnet}.{10 + index} node{index}\n" for index in range(self.count))
        )
        inner = (
            f"hostname {node.hostname} && mount --bind {hosts} /etc/hosts && "
            f"mount -t tmpfs -o size=4g tmpfs /dev/shm && exec {SSHD} -D -e -f {config}"
        )
        node.process = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                node.namespace,
                "unshare",
                "--uts",
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                inner,
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(node.folder / "sshd.log", "ab"),
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection((node.ip, 22), timeout=0.5):
                    break
            except OSError:
                time.sleep(0.05)
        else:
            raise RuntimeError(f"sshd of {node.hostname} did not start; see {node.folder}/sshd.log")
        public = (node.folder / "ssh_host_ed25519_key.pub").read_text().split()
        return f"{node.ip} {public[0]} {public[1]}\n"

    def config_toml(self, python: str, workdir: Path, cpu_binds: list[str] | None = None) -> str:
        """`[host]` and `[[nodes]]` for a campaign over these nodes (each its own workdir)."""
        text = (
            f'[host]\nkind = "ssh"\nuser = "root"\nidentity_file = "{self.client_key}"\n'
            f'known_hosts = "{self.known_hosts}"\nssh_config = "{self.folder}/no_ssh_config"\n'
            f'python = "{python}"\n\n'
        )
        for node in self.nodes:
            text += (
                f'[[nodes]]\nhostname = "{node.ip}"\nip = "{node.ip}"\ninterface = "{node.interface}"\n'
                f'workdir = "{workdir}/{node.hostname}"\n'
            )
            if cpu_binds:
                text += f'cpu_bind = "{cpu_binds[node.index % len(cpu_binds)]}"\n'
            text += "\n"
        return text

    def stop(self) -> None:
        """Every process in the namespaces killed, the namespaces and the bridge removed."""
        for node in self.nodes:
            pids = subprocess.run(
                ["ip", "netns", "pids", node.namespace], capture_output=True, text=True
            ).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            if node.process is not None:
                node.process.wait(timeout=10)
            subprocess.run(["ip", "netns", "delete", node.namespace], capture_output=True)
        subprocess.run(["ip", "link", "delete", self.bridge], capture_output=True)
