"""No secret is written anywhere: a campaign with a token in service.env, an experiment's env and
host.env_setup runs (the known-pace fake server, a fake on purpose: the point is what the tool
writes, not what vLLM does), then every file it wrote (state, reports, ledger, html, csv, server
logs, artifacts) is searched for the token. Files the tool writes under the host workdir are 0600."""

from __future__ import annotations

import stat
import textwrap
from pathlib import Path

import pytest
from conftest import run_cli
from test_experiments import pace_campaign

from tasks.redaction import redacted_env, redacted_shell

TOKEN = "hf_SECRETtokenVALUE123"


def test_redacted_shell_keeps_names_and_digests_values() -> None:
    line = f"export HF_TOKEN={TOKEN} && source /opt/venv/bin/activate; export B='two words' C=\"x y\""
    shown = redacted_shell(line)
    assert TOKEN not in shown and "two words" not in shown and "x y" not in shown
    assert "export HF_TOKEN=sha256:" in shown and "source /opt/venv/bin/activate" in shown
    assert "B=sha256:" in shown and "C=sha256:" in shown
    # The same line gives the same digest (a change is still seen) and another value another one.
    assert redacted_shell(line) == shown != redacted_shell(line.replace(TOKEN, TOKEN + "x"))
    assert redacted_env({"A": TOKEN})["A"].startswith("sha256:")


@pytest.mark.heavy
def test_no_file_the_campaign_writes_holds_a_token(tmp_path: Path, tiny_model: Path) -> None:
    state_path = pace_campaign(
        tmp_path,
        tiny_model,
        textwrap.dedent(f"""\
        [[experiments]]
        option = "speculative_decoding"
        name = "faster"
        extra_args = ["--pace-ms", "6"]
        env = {{ HF_TOKEN = "{TOKEN}" }}
        capture = false
        serving = "single"
        """),
    )
    config = (tmp_path / "campaign.toml").read_text()
    config = config.replace(
        "[service]\n",
        f'[host]\nworkdir = "{tmp_path / "work"}"\nenv_setup = "export OTHER_TOKEN={TOKEN}"\n[service]\n',
        1,
    )
    config = config.replace("env = { PACE_MODEL", f'env = {{ API_KEY = "{TOKEN}", PACE_MODEL', 1)
    (tmp_path / "campaign.toml").write_text(config)
    result = run_cli(["resume"], tmp_path, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert TOKEN not in result.stdout + result.stderr
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.name != "campaign.toml" and "model" not in p.parts]
    kinds = {p.suffix for p in written}
    assert {".json", ".md", ".html", ".csv", ".log"} <= kinds, kinds
    assert state_path in written and (tmp_path / "reports" / "ledger.json") in written
    holding = [str(p.relative_to(tmp_path)) for p in written if TOKEN.encode() in p.read_bytes()]
    assert holding == []
    findings = (tmp_path / "reports" / "pace" / "findings.md").read_text()
    assert "HF_TOKEN=sha256:" in findings  # the name is shown, the value digested
    logs = [p for p in (tmp_path / "work").rglob("*") if p.is_file() and p.suffix == ".log"]
    assert logs and all(stat.S_IMODE(p.stat().st_mode) & 0o077 == 0 for p in logs), [
        (p.name, oct(p.stat().st_mode)) for p in logs
    ]
