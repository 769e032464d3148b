"""Bad input, table-driven: every case exits 2 with one line naming the file or field, no
traceback, and every file that was on disk is still there, unchanged."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from orchestrate.main import main

GOOD_STATE = {
    "schema_version": 2,
    "campaign": "quick",
    "todos": [{"id": "a", "content": "c", "kind": "command", "status": "pending"}],
}
QUICK = '[campaign]\nname = "quick"\nphases = []\n[[commands]]\nid = "a"\ncontent = "c"\nrun = "true"\n'

# (case, config text or None, state document or text or None, arguments, expected fragment)
CASES = [
    ("unknown key", '[campaign]\ncolour = "red"\n', None, ["resume"], "campaign.colour': unknown key"),
    ("not TOML", "[campaign\n", None, ["resume"], "not valid TOML"),
    ("tp 0", "[service]\ntensor_parallel = 0\n", None, ["resume"], "service.tensor_parallel"),
    ("ssh without host", '[host]\nkind = "ssh"\n', None, ["resume"], "host.alias"),
    ("negative batch", "[gemm]\nbatch_sizes = [-1, 0]\n", None, ["resume"], "gemm.batch_sizes.0"),
    ("no batch", "[gemm]\nbatch_sizes = []\n", None, ["resume"], "gemm.batch_sizes"),
    (
        "sweep reversed",
        "[allreduce]\nsweep_min_bytes = 4096\nsweep_max_bytes = 1024\n",
        None,
        ["resume"],
        "sweep_min_bytes is above sweep_max_bytes",
    ),
    ("decode tokens", "[allreduce]\ndecode_tokens = [0, -8]\n", None, ["resume"], "allreduce.decode_tokens.0"),
    ("huge concurrency", "[macro]\nconcurrency_max = 100000000\n", None, ["resume"], "macro.concurrency_max"),
    ("one output token", "[macro]\noutput_tokens = 1\n", None, ["resume"], "macro.output_tokens"),
    ("no input", "[macro]\ninput_tokens = 0\n", None, ["resume"], "macro.input_tokens"),
    ("unknown phase", '[campaign]\nphases = ["nope"]\n', None, ["resume"], "campaign.phases.0"),
    ("phase twice", '[campaign]\nphases = ["macro", "macro"]\n', None, ["resume"], "a phase is listed twice"),
    ("bad name", '[campaign]\nname = "bad name!"\n', None, ["resume"], "campaign.name"),
    ("no attempts", "[campaign]\nmax_attempts = 0\n", None, ["resume"], "campaign.max_attempts"),
    ("port", "[service]\nport = 70000\n", None, ["resume"], "service.port"),
    ("ssh port", "[host]\nport = 0\n", None, ["resume"], "host.port"),
    ("accelerator", '[host]\naccelerator = "tpu"\n', None, ["resume"], "host.accelerator"),
    ("launcher", '[service]\nlauncher = "docker"\n', None, ["resume"], "service.launcher"),
    ("no profiled requests", "[profile]\nrequests = 0\n", None, ["resume"], "profile.requests"),
    ("int4 group", "[gemm]\nint4_group_size = 100\n", None, ["resume"], "gemm.int4_group_size"),
    ("one repeat", "[gemm]\nrepeats = 1\n", None, ["resume"], "gemm.repeats"),
    ("one iteration", "[allreduce]\niterations = 1\n", None, ["resume"], "allreduce.iterations"),
    ("tiny context", "[service]\nmax_model_len = 8\n", None, ["resume"], "service.max_model_len"),
    (
        "requests over context",
        "[service]\nmax_model_len = 1024\n[macro]\noutput_tokens = 2000\n",
        None,
        ["resume"],
        "vLLM would refuse every request",
    ),
    (
        "command id",
        '[campaign]\nphases = []\n[[commands]]\nid = "a b"\ncontent = "c"\nrun = "true"\n',
        None,
        ["resume"],
        "commands.0.id",
    ),
    (
        "command without run",
        '[campaign]\nphases = []\n[[commands]]\nid = "a"\ncontent = "c"\n',
        None,
        ["resume"],
        "commands.0.run",
    ),
    ("unknown dependency", QUICK + 'depends_on = ["zz"]\n', None, ["resume"], "depends on unknown task 'zz'"),
    (
        "cycle",
        '[campaign]\nphases = []\n[[commands]]\nid = "a"\ncontent = "c"\nrun = "true"\ndepends_on = ["b"]\n'
        '[[commands]]\nid = "b"\ncontent = "c"\nrun = "true"\ndepends_on = ["a"]\n',
        None,
        ["resume"],
        "cycle a -> b -> a",
    ),
    (
        "id twice",
        QUICK + '[[commands]]\nid = "a"\ncontent = "c"\nrun = "true"\n',
        None,
        ["resume"],
        "'a' is declared twice",
    ),
    (
        "missing key file",
        '[host]\nkind = "ssh"\nalias = "gpu"\nidentity_file = "/nonexistent/key"\n',
        None,
        ["resume"],
        "host.identity_file",
    ),
    (
        "one node",
        '[host]\nkind = "ssh"\n[[nodes]]\nhostname = "a"\nip = "10.0.0.1"\ninterface = "eth0"\n',
        None,
        ["resume"],
        "field 'nodes': one node is a single host",
    ),
    (
        "nodes local",
        '[[nodes]]\nhostname = "a"\nip = "1.1.1.1"\ninterface = "e"\n[[nodes]]\nhostname = "b"\n'
        'ip = "1.1.1.2"\ninterface = "e"\n',
        None,
        ["resume"],
        "host.kind': nodes are reached over SSH",
    ),
    (
        "node without ip",
        '[host]\nkind = "ssh"\n[[nodes]]\nhostname = "a"\ninterface = "e"\n[[nodes]]\nhostname = "b"\n'
        'ip = "1.1.1.2"\ninterface = "e"\n',
        None,
        ["resume"],
        "nodes.0.ip",
    ),
    (
        "tp over nodes",
        '[host]\nkind = "ssh"\n[service]\ntensor_parallel = 3\n[[nodes]]\nhostname = "a"\nip = "1.1.1.1"\n'
        'interface = "e"\n[[nodes]]\nhostname = "b"\nip = "1.1.1.2"\ninterface = "e"\n',
        None,
        ["resume"],
        "3 ranks do not split evenly over 2 nodes",
    ),
    ("env not a table", '[service]\nenv = "x"\n', None, ["resume"], "service.env"),
    ("section not a table", "macro = 5\n", None, ["resume"], "macro"),
    ("unknown section", "[nope]\nx = 1\n", None, ["resume"], "nope': unknown key"),
    ("extra args not a list", '[service]\nextra_args = "x"\n', None, ["resume"], "service.extra_args"),
    ("config is a folder", "DIR", None, ["resume"], "is a folder; --config"),
    ("config not UTF-8", b'[campaign]\nname = "\xff\xfe"\n', None, ["resume"], "not UTF-8"),
    ("config missing", "MISSING", None, ["resume"], "no such config file"),
    ("state not JSON", QUICK, '{"schema_version": 2, "todos": [', ["resume"], "not valid JSON"),
    ("state version 9", QUICK, {**GOOD_STATE, "schema_version": 9}, ["status"], "unsupported version 9"),
    ("state version 1", QUICK, {**GOOD_STATE, "schema_version": 1}, ["resume"], "older orchestrate"),
    (
        "state id twice",
        QUICK,
        {**GOOD_STATE, "todos": GOOD_STATE["todos"] * 2},
        ["reset", "a"],
        "todo id 'a' appears twice",
    ),
    (
        "negative attempts",
        QUICK,
        {**GOOD_STATE, "todos": [{**GOOD_STATE["todos"][0], "attempts": -5}]},
        ["resume"],
        "todos.0.attempts",
    ),
    (
        "unknown status",
        QUICK,
        {**GOOD_STATE, "todos": [{**GOOD_STATE["todos"][0], "status": "done"}]},
        ["status"],
        "todos.0.status",
    ),
    ("another campaign", QUICK, {**GOOD_STATE, "campaign": "other"}, ["resume"], "holds campaign 'other'"),
    ("state is a folder", QUICK, "DIR", ["resume"], "is a folder; --state"),
    ("state under a file", QUICK, None, ["--state", "campaign.toml/todo.json", "resume"], "is a file, not a folder"),
    ("reports is a file", QUICK, GOOD_STATE, ["--reports", "campaign.toml", "report"], "is a file; --reports"),
    ("reset unknown todo", QUICK, GOOD_STATE, ["reset", "zz"], "no todo 'zz'"),
    ("status without state", QUICK, None, ["status"], "no state yet"),
    ("init over a state", QUICK, GOOD_STATE, ["init"], "already exists"),
]


def snapshot(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()
    }


@pytest.mark.parametrize("case, config, state, args, expected", CASES, ids=[c[0] for c in CASES])
def test_malformed_input_is_one_line_exit_2_nothing_changed(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
    case: str,
    config,
    state,
    args: list[str],
    expected: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = list(args)
    if config == "DIR":
        (tmp_path / "conf").mkdir()
        argv = ["--config", "conf", *argv]
    elif config == "MISSING":
        argv = ["--config", "absent.toml", *argv]
    elif isinstance(config, bytes):
        (tmp_path / "campaign.toml").write_bytes(config)
    elif config is not None:
        (tmp_path / "campaign.toml").write_text(config)
    state_path = tmp_path / "state" / "todo.json"
    if state == "DIR":
        state_path.mkdir(parents=True)
    elif state is not None:
        state_path.parent.mkdir()
        state_path.write_text(state if isinstance(state, str) else json.dumps(state))
    before = snapshot(tmp_path)
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, (case, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert expected in err, err
    after = snapshot(tmp_path)
    assert {name: digest for name, digest in after.items() if name in before} == before
