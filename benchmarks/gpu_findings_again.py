"""Regenerate a GPU campaign's findings here from what benchmarks/gpu_campaign.sh brought back.

usage: python benchmarks/gpu_findings_again.py SHAPE.tar.gz WORK OUT.md

The pack holds the campaign's todo file and rank 0's trace. They are put back where the todo
file says (paths under the device's work folder are moved under WORK), the campaign's config
is written as it ran, and `orchestrate resume` runs again: only what the current code computes
differently (the analysis, when the rules changed) runs, then the findings are written.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    pack, work, out = Path(sys.argv[1]), Path(sys.argv[2]).absolute(), Path(sys.argv[3])
    shape = pack.name.removesuffix(".tar.gz")
    unpacked = work / "pack"
    shutil.rmtree(work, ignore_errors=True)
    unpacked.mkdir(parents=True)
    with tarfile.open(pack) as archive:
        archive.extractall(unpacked, filter="data")
    device_dir = f"/tmp/gw/{shape}"
    state_text = (unpacked / "todo.json").read_text().replace(device_dir, str(work))
    state = json.loads(state_text)
    (work / "state").mkdir()
    (work / "state" / "todo.json").write_text(state_text)
    capture = next(t for t in state["todos"] if t["id"] == "profile_capture")["result"]
    traces = Path(capture["folder"])
    traces.mkdir(parents=True)
    for name in capture["files"]:
        shutil.copy(unpacked / name, traces / name)
    script = (ROOT / "benchmarks" / "gpu_campaign.sh").read_text()
    config = script[script.index("[campaign]") : script.index("TOML\n", script.index("[campaign]"))]
    config = config.replace("$shape", shape).replace("$model", f"/tmp/gw/models/{shape}")
    (work / "campaign.toml").write_text(config)
    subprocess.run([sys.executable, "-m", "orchestrate", "resume"], cwd=work, check=True)
    shutil.copy(work / "reports" / f"h200-{shape}" / "findings.md", out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
