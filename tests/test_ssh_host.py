"""SSH transport against a real OpenSSH server on loopback (no fakes)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from sshd import keygen

from orchestrator.errors import CommandFailed, ConnectionLost, HostKeyError
from orchestrator.hosts.ssh import SSHHost, SSHTarget


def test_commands_exit_codes_streams_and_quoting(ssh_host: SSHHost) -> None:
    result = ssh_host.run(["printf", "%s|", "a b", "it's", "$HOME", "`x`;rm"])
    assert result.stdout == "a b|it's|$HOME|`x`;rm|"
    failed = ssh_host.run("echo out; echo err >&2; exit 3", check=False)
    assert (failed.exit_code, failed.stdout, failed.stderr) == (3, "out\n", "err\n")
    with pytest.raises(CommandFailed, match="exited 3") as info:
        ssh_host.run("echo boom >&2; exit 3")
    assert "boom" in info.value.output_tail
    assert ssh_host.run("sleep 5", timeout_s=0.5, check=False).exit_code == 124


def test_connection_is_reused(ssh_host: SSHHost) -> None:
    for _ in range(20):
        ssh_host.run("true")
    assert ssh_host.connects == 1


def test_put_and_get_both_ways(ssh_host: SSHHost, tmp_path: Path) -> None:
    payload = os.urandom(3 * 1024 * 1024 + 17)
    local = tmp_path / "up.bin"
    local.write_bytes(payload)
    remote = str(tmp_path / "remote" / "deep" / "file.bin")
    ssh_host.put(local, remote)
    back = tmp_path / "down.bin"
    ssh_host.get(remote, back)
    assert back.read_bytes() == payload


def test_get_resumes_a_partial_download(ssh_host: SSHHost, tmp_path: Path) -> None:
    payload = os.urandom(4 * 1024 * 1024)
    remote = tmp_path / "trace.bin"
    remote.write_bytes(payload)
    target = tmp_path / "fetched" / "trace.bin"
    target.parent.mkdir()
    # A partial copy whose first MiB is deliberately marked: if the download restarted, the
    # mark would be overwritten; a resumed download keeps it and fetches only the rest.
    marked = b"\x00" * (1024 * 1024)
    (target.parent / "trace.bin.part").write_bytes(marked)
    ssh_host.get(str(remote), target)
    data = target.read_bytes()
    assert len(data) == len(payload)
    assert data[: len(marked)] == marked and data[len(marked) :] == payload[len(marked) :]
    assert not (target.parent / "trace.bin.part").exists()


def wait_until_drop_is_seen(host: SSHHost) -> None:
    """Wait until the client has seen the connection drop. Until its reader thread has read the
    FIN, a command goes out on the dead connection and is (rightly) reported as lost, because
    it may or may not have run: that case is the mid-command test below, not this one."""
    deadline = time.monotonic() + 10
    while host.connected:
        assert time.monotonic() < deadline, "the client never noticed the dropped connection"
        time.sleep(0.02)


def test_dropped_connection_between_commands_reconnects(ssh_host: SSHHost, sshd) -> None:
    assert ssh_host.run("echo one").stdout == "one\n"
    sshd.kill_sessions()
    wait_until_drop_is_seen(ssh_host)
    assert ssh_host.run("echo two").stdout == "two\n"
    assert ssh_host.connects == 2


def test_connection_killed_mid_command_is_reported_as_lost(ssh_host: SSHHost, sshd) -> None:
    threading.Timer(0.5, sshd.kill_sessions).start()
    with pytest.raises(ConnectionLost, match="connection lost"):
        ssh_host.run("sleep 10")
    assert ssh_host.run("echo back").stdout == "back\n"


@pytest.mark.heavy
def test_sshd_restart_waits_with_backoff(ssh_host: SSHHost, sshd, capsys: pytest.CaptureFixture) -> None:
    assert ssh_host.run("echo up").stdout == "up\n"
    sshd.stop()
    wait_until_drop_is_seen(ssh_host)
    threading.Timer(2.0, sshd.start).start()
    started = time.monotonic()
    assert ssh_host.run("echo again").stdout == "again\n"
    assert time.monotonic() - started >= 1.5
    # Each wait is said, with what failed and when the next try comes: backoff is not a hang.
    waits = [line for line in capsys.readouterr().err.splitlines() if line.startswith("orchestrate: waiting for ssh")]
    assert waits and "attempt 1 of 12 failed" in waits[0] and "trying again in" in waits[0]


def test_unknown_host_key_is_refused_with_the_fix(sshd, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    host = SSHHost(
        SSHTarget(
            alias="h",
            hostname="127.0.0.1",
            port=sshd.port,
            user=sshd.user,
            identity_files=[str(sshd.client_key)],
            known_hosts=str(empty),
            ssh_config=None,
        )
    )
    with pytest.raises(HostKeyError, match=rf"not in .*known_hosts.*ssh-keyscan -p {sshd.port} 127\.0\.0\.1 >>"):
        host.run("true")
    assert empty.read_text() == ""  # never auto-added


def test_an_identity_file_that_is_not_a_key_is_refused_at_once(sshd, tmp_path: Path) -> None:
    import time

    from orchestrator.errors import HostError

    public = tmp_path / "id.pub"
    public.write_text(
        Path(str(sshd.client_key) + ".pub").read_text()
        if Path(str(sshd.client_key) + ".pub").exists()
        else "ssh-ed25519 AAAA x\n"
    )
    host = SSHHost(
        SSHTarget(
            alias="h",
            hostname="127.0.0.1",
            port=sshd.port,
            user=sshd.user,
            identity_files=[str(public)],
            known_hosts=str(sshd.known_hosts),
            ssh_config=None,
        )
    )
    started = time.monotonic()
    with pytest.raises(HostError, match=r"id\.pub: not a private key .*identity_file of 'h'"):
        host.run("true")
    assert time.monotonic() - started < 5  # not retried as a network error (76 s before)


def test_changed_host_key_is_refused(sshd, tmp_path: Path) -> None:
    other = tmp_path / "other_key"
    keygen(other)
    public = (tmp_path / "other_key.pub").read_text().split()
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd.port} {public[0]} {public[1]}\n")
    host = SSHHost(
        SSHTarget(
            alias="h",
            hostname="127.0.0.1",
            port=sshd.port,
            user=sshd.user,
            identity_files=[str(sshd.client_key)],
            known_hosts=str(known),
            ssh_config=None,
        )
    )
    with pytest.raises(HostKeyError, match="CHANGED"):
        host.run("true")


def test_ssh_config_alias_is_honoured(sshd, tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host gpu-box\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {sshd.user}\n"
        f"  IdentityFile {sshd.client_key}\n"
    )
    host = SSHHost(
        SSHTarget(alias="gpu-box", hostname="gpu-box", known_hosts=str(sshd.known_hosts), ssh_config=str(config))
    )
    assert host.target.port == sshd.port and host.target.hostname == "127.0.0.1"
    assert host.run("echo via-alias").stdout == "via-alias\n"
    host.close()


def test_proxyjump_through_a_bastion(sshd, tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host bastion\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {sshd.user}\n  IdentityFile {sshd.client_key}\n"
        f"Host inner\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {sshd.user}\n  IdentityFile {sshd.client_key}\n"
        "  ProxyJump bastion\n"
    )
    host = SSHHost(
        SSHTarget(alias="inner", hostname="inner", known_hosts=str(sshd.known_hosts), ssh_config=str(config))
    )
    assert host.run("echo jumped").stdout == "jumped\n"
    assert host._jump is not None and host._jump.connects == 1
    host.close()


@pytest.mark.heavy
def test_campaign_survives_sshd_restart(sshd, tmp_path: Path) -> None:
    import subprocess
    import sys

    from conftest import run_cli

    lines = [sshd.config_toml(tmp_path / "work", sys.executable), '[campaign]\nname = "remote"\nphases = []\n']
    for index in range(8):
        deps = f'["c{index - 1}"]' if index else "[]"
        lines.append(
            f'[[commands]]\nid = "c{index}"\ncontent = "step {index}"\n'
            f'run = "sleep 0.4; echo c{index} >> {tmp_path}/done.log"\ndepends_on = {deps}\n'
        )
    (tmp_path / "campaign.toml").write_text("\n".join(lines))
    process = subprocess.Popen(
        [sys.executable, "-m", "orchestrate", "resume"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.2)
    sshd.stop()
    time.sleep(2)
    sshd.start()
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    done = (tmp_path / "done.log").read_text().split()
    assert set(done) == {f"c{index}" for index in range(8)}
    assert run_cli(["status"], tmp_path).returncode == 0


def test_one_shell_serves_many_commands_without_leaking_state(ssh_host: SSHHost) -> None:
    assert ssh_host.run("exit 5", check=False).exit_code == 5  # a subshell: the shell lives on
    assert ssh_host.run("cd /; export LEAK=1; printf no-newline").stdout == "no-newline"
    home = ssh_host.run("cd ~ && pwd").stdout.strip()
    assert ssh_host.run("pwd; echo ${LEAK:-clean}").stdout.split() == [home, "clean"]
    assert ssh_host.run("cat", timeout_s=5).stdout == ""  # stdin is /dev/null, not the protocol
    big = ssh_host.run("head -c 3000000 /dev/zero | tr '\\0' x; echo err >&2")
    assert len(big.stdout) == 3_000_000 and big.stderr == "err\n"
    assert ssh_host.run("# a comment at the end").exit_code == 0
    assert ssh_host.connects == 1


def test_a_syntax_error_does_not_end_the_shell(ssh_host: SSHHost) -> None:
    broken = ssh_host.run("if then fi (", check=False)
    assert broken.exit_code != 0 and "syntax" in broken.stderr
    assert ssh_host.run("echo still-here").stdout == "still-here\n"
    assert ssh_host.connects == 1


def test_detached_process_has_its_own_group_and_outlives_the_connection(
    ssh_host: SSHHost, sshd, tmp_path: Path
) -> None:
    pid = ssh_host.start_detached(["sleep", "120"], str(tmp_path / "log"), str(tmp_path / "pid"))
    try:
        ids = ssh_host.run(f"ps -o pgid=,sid= -p {pid}; ps -o sid= -p $$").stdout.split()
        pgid, sid, shell_sid = (int(x) for x in ids)
        # Its own process group (what stop_group signals), in the shell's session: a session of
        # its own would put it in its own scheduler autogroup (see Host.start_detached).
        assert pgid == pid and sid == shell_sid
        sshd.kill_sessions()  # the connection that started it dies
        wait_until_drop_is_seen(ssh_host)
        assert ssh_host.group_pids(pid) == [pid]  # a new connection still sees it running
    finally:
        assert ssh_host.stop_group(pid, grace_s=5)


def test_a_commands_children_die_with_the_connection(ssh_host: SSHHost, sshd) -> None:
    """The connection drops (sshd's process for it killed, as when the controller is SIGKILLed)
    while a command runs children, one in a session of its own as torchrun starts its ranks:
    within a few seconds none is left, and the next command on a new connection works."""
    from conftest import wait_for_processes

    marker = "3007.25"
    threading.Timer(1.0, sshd.kill_sessions).start()
    with pytest.raises(ConnectionLost):
        ssh_host.run(f"sleep {marker} & setsid sleep {marker} & wait", timeout_s=60)
    assert wait_for_processes(f"sleep {marker}", 0) == []
    assert ssh_host.run("echo back").stdout == "back\n"


def test_a_command_that_ends_leaves_no_watchdog(ssh_host: SSHHost) -> None:
    """Each command's watchdog ends with it: many short commands leave no process behind, and
    exit codes still come through."""
    assert ssh_host.run("exit 7", check=False).exit_code == 7
    for _ in range(20):
        ssh_host.run("true")
    time.sleep(1.2)  # a watchdog's last `sleep 1`
    table = ssh_host.run("ps -o pid=,args= --ppid $PPID").stdout  # what hangs off our sshd
    assert len([line for line in table.splitlines() if "sleep 1" in line]) == 0, table


def streamed_lines(host, command: str) -> tuple[list[tuple[str, float]], float, str]:
    """Run ``command`` with a stderr line handler; each line seen with when, the run's length."""
    seen: list[tuple[str, float]] = []
    started = time.monotonic()
    result = host.run(command, on_stderr_line=lambda line: seen.append((line, time.monotonic() - started)))
    return seen, time.monotonic() - started, result.stderr


@pytest.mark.heavy
@pytest.mark.parametrize("transport", ["ssh", "local"])
def test_stderr_lines_arrive_while_the_command_runs(transport: str, ssh_host: SSHHost) -> None:
    """Live progress rests on this: a line is seen when written, not when the command ends.
    Both transports, the real sshd for SSH; a partial line waits for its newline."""
    from orchestrator.hosts.local import LocalHost

    host = ssh_host if transport == "ssh" else LocalHost()
    seen, took, stderr = streamed_lines(
        host, "echo one >&2; sleep 1.5; printf 'tw' >&2; sleep 0.3; echo o >&2; echo out; echo three >&2"
    )
    assert [line for line, _ in seen] == ["one", "two", "three"]
    assert seen[0][1] < took - 1.0, seen  # "one" came before the 1.5 s sleep ended
    assert stderr == "one\ntwo\nthree\n"  # the whole stream is still returned


def test_fetch_reports_its_bytes(ssh_host: SSHHost, tmp_path: Path) -> None:
    remote = tmp_path / "trace.bin"
    remote.write_bytes(os.urandom(5 * 1024 * 1024 + 3))
    seen: list[tuple[int, int]] = []
    ssh_host.get(str(remote), tmp_path / "here" / "trace.bin", progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (5 * 1024 * 1024 + 3,) * 2
    assert len(seen) >= 5 and all(a[0] < b[0] for a, b in zip(seen, seen[1:], strict=False))
