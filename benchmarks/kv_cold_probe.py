"""Where the KV micro's cold pass and the server part (a GPU probe, not a test): the micro's bf16 decode
attention runs 1.1 µs a call under the server's (H100: 8.65 against 9.73 on the Qwen3-MoE shape, 8.82
against 9.63 on Llama-8B) with the very kernel the server runs (whole names compared), while its FP8
write and FP8 attention match. Ruled out already: max_seqlen_k captured at max_model_len, descales
passed in bf16 (benchmarks/results/h100_qwen3moe_run3_2026-12-05.md). This runs kv_bench.py's cold pass
once as the campaign does and once with each probe of what else differs, and prints the kernels:
- pool: each layer's cache a pool of server size (hundreds of MB) with the sequence in its first blocks;
- gemm: the QKV projection's GEMM run ahead of the write, as the kernel before it in the server;
- both.

usage (on the GPU host, vLLM on the path): python benchmarks/kv_cold_probe.py [qwen3moe|llama8b] [--m 1] [--context 80]
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

from tasks.gemm.kv_layer_kernels import KERNELS, named  # noqa: E402

SHAPES = {  # attention per rank, and the hidden size the QKV projection reads
    "qwen3moe": {"q_heads": 32, "kv_heads": 4, "head_size": 128, "hidden": 2048},
    "llama8b": {"q_heads": 32, "kv_heads": 8, "head_size": 128, "hidden": 4096},
}
POOL_BYTES = 200 << 20  # a layer's KV cache in the server, estimated (not read from a log): 0.92 x 80 GB
# less 61 GB of weights and the graphs' and activations' memory leaves about 10 GB over 48 layers (H100, Qwen3-MoE)


def probes(shape: dict[str, int], block: int) -> dict[str, dict[str, int]]:
    block_bytes = block * shape["kv_heads"] * 2 * shape["head_size"] * 2
    pool = {"probe_pool_blocks": POOL_BYTES // block_bytes}
    gemm = {"probe_gemm_before": shape["hidden"]}
    return {"as the campaign": {}, "pool": pool, "gemm": gemm, "both": pool | gemm}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shape", choices=sorted(SHAPES), nargs="?", default="qwen3moe")
    parser.add_argument("--m", type=int, default=1)
    parser.add_argument("--context", type=int, default=80)
    args = parser.parse_args()
    shape = SHAPES[args.shape]
    base = {k: v for k, v in shape.items() if k != "hidden"} | {"block_size": 16}
    base["points"] = [{"m": args.m, "context": args.context}]
    print(f"| probe | dtype | {' | '.join(KERNELS)} | cold write + attention |")
    print("|---|---|" + "---|" * (len(KERNELS) + 1))
    for label, extra in probes(shape, 16).items():
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
            json.dump(base | extra, handle)
        done = subprocess.run(
            [sys.executable, str(ROOT / "tasks/gemm/remote/kv_bench.py"), handle.name, "--repeats", "10"],
            capture_output=True,
            text=True,
            cwd=ROOT / "tasks/gemm/remote",
            timeout=300,
        )
        rows = json.loads(done.stdout)["rows"] if done.returncode == 0 else []
        if not rows:
            print(f"| {label} | - | kv_bench.py failed: {done.stderr.strip().splitlines()[-1:]} |")
        for row in rows:
            kernels = row.get("cold_kernels_us") or {}
            cells = [
                f"{sum(us for name, us in kernels.items() if named(label, name)):.2f}" if kernels else "-"
                for label in KERNELS
            ]
            total = (row.get("cold_write_us") or 0) + (row.get("cold_attention_us") or 0)
            why = row.get("note") or row.get("skipped")
            note = f" ({why})" if why else ""
            print(f"| {label} | {row['kv_dtype']} | {' | '.join(cells)} | {total:.2f}{note} |")


if __name__ == "__main__":
    main()
