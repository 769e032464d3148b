"""The FP8 KV micro on an MLA shape, alone (a GPU probe, not a test): kv_bench.py as the gemm phase
ships it, with the spec the campaign derives for the Kimi-K2 4-layer shape (one rank's MLA heads and
latent, the server's max_model_len, the sweep's and the capture's points), printed as a table beside
the per-layer change the H100 campaigns' traces measured (FLASH_ATTN_MLA bf16 -> TRITON_MLA FP8).

usage (on the GPU host, vLLM on the path): python benchmarks/kv_mla_micro.py [--out rows.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpu_model_shapes import shape  # noqa: E402

from tasks.gemm.kv_layer_kernels import KERNELS, named  # noqa: E402
from tasks.model.shapes import model_shapes  # noqa: E402

POINTS = [{"m": m, "context": context} for context in (80, 96) for m in (1, 2, 4)]
"""gpu_experiments.sh's campaign: 64-token prompts, 64 tokens out (sweep), 32 (capture); c = 1, 2, 4."""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    mla = model_shapes(shape("kimik2_4layer_int4", {}), 1).mla
    spec = {"mla": mla.model_dump(), "max_model_len": 2048, "block_size": 16, "points": POINTS}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(spec, handle)
    done = subprocess.run(
        [sys.executable, "kv_bench.py", handle.name, "--repeats", str(args.repeats)],
        capture_output=True,
        text=True,
        cwd=ROOT / "tasks/gemm/remote",
        timeout=400,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        print(f"kv_bench.py failed (rc {done.returncode}): {done.stderr.strip()[-1500:]}")
        return
    rows = json.loads(lines[-1])["rows"]
    if args.out:
        Path(args.out).write_text(json.dumps({"spec": spec, "rows": rows}))
    print(f"# {json.dumps(spec['mla'])}, max_model_len 2048, block 16")
    print(
        f"| dtype | m | context | cold write | cold attention | layer µs | {' | '.join(KERNELS)} | other kernels | note |"
    )
    print("|---|---|---|---|---|---|" + "---|" * (len(KERNELS) + 2))
    layer = {}
    for row in rows:
        if row.get("skipped"):
            print(f"| {row['kv_dtype']} | {row['m']} | {row['context']} | skipped: {row['skipped']} |")
            continue
        kernels = row.get("cold_kernels_us") or {}
        cells = [f"{sum(us for n, us in kernels.items() if named(label, n)):.2f}" for label in KERNELS]
        other = sum(us for n, us in kernels.items() if not any(named(label, n) for label in KERNELS))
        total = (row.get("cold_write_us") or 0) + (row.get("cold_attention_us") or 0)
        layer[(row["kv_dtype"], row["m"], row["context"])] = total
        print(
            f"| {row['kv_dtype']} | {row['m']} | {row['context']} | {row.get('cold_write_us') or 0:.2f}"
            f" | {row.get('cold_attention_us') or 0:.2f} | {total:.2f} | {' | '.join(cells)} | {other:.2f}"
            f" | {row.get('note', '')} |"
        )
    for (dtype, m, context), us in sorted(layer.items()):
        if dtype == "fp8" and ("auto", m, context) in layer:
            print(f"# m={m} context={context}: FP8 - bf16 {us - layer[('auto', m, context)]:+.2f} µs a layer")
    print(
        "# the traces (H100, runs of 2026-12-06, c=1, context ~80): -4.86 µs a layer (device work -0.019 ms / 4 layers)"
    )


if __name__ == "__main__":
    main()
