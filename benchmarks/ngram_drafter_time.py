"""What vLLM's n-gram drafter costs a step, beside what a speculative step cost beyond the verify
GEMMs: the measurement behind leaving the drafter inside the assumed `spec_step_extra_ms`.

The contexts are a campaign's own recorded requests (macro_single's token ids, prompt and output),
batched as the levels batch them; each is timed where its drafter runs: the CPU drafter (vLLM's
numba `batch_propose_numba`, one thread, as a rank of the default gets) with a wall clock, the GPU
drafter (`NgramGPUKernel`'s suffix search) with CUDA events where a GPU is here. The ledger's
measured `spec_step_extra_ms` / `spec_gpu_step_extra_ms` (realised by the experiments) are printed
beside them.

usage: python benchmarks/ngram_drafter_time.py TODO_JSON [LEDGER_JSON]
  (run with the interpreter that has vLLM: on this machine .venv/bin/python)
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tasks" / "gemm" / "remote"))

MIN_N, MAX_N, K = 2, 4, 3  # the shipped rules' drafter (tasks/decisions/decision_rules.toml)
REPEATS = 2000


def contexts(todo: Path) -> list[list[int]]:
    """Each recorded request's prompt and output: the longest context its drafter searched."""
    raw = gzip.decompress(todo.read_bytes()) if todo.suffix == ".gz" else todo.read_bytes()
    todos = {t["id"]: t for t in json.loads(raw)["todos"]}
    kept = todos["macro_single"]["result"].get("token_ids") or []
    if not kept:
        sys.exit(f"{todo}: macro_single recorded no token ids (the server did not return them)")
    return [request["prompt"] + request["output"] for request in kept]


def cpu_drafter_us(batch: list[list[int]]) -> float | None:
    try:
        from vllm.v1.spec_decode.ngram_proposer import batch_propose_numba
    except ImportError:  # numba missing: vLLM's GPU payload may not carry it
        return None

    width = 1 << (max(map(len, batch)) + 1).bit_length()
    ids = np.zeros((len(batch), width), dtype=np.int32)
    for row, tokens in enumerate(batch):
        ids[row, : len(tokens)] = tokens
    lengths = np.array([len(tokens) for tokens in batch], dtype=np.int32)
    drafts, counts = np.zeros((len(batch), K), dtype=np.int32), np.zeros(len(batch), dtype=np.int32)
    rows = list(range(len(batch)))

    def call() -> None:
        batch_propose_numba(rows, lengths, ids, MIN_N, MAX_N, width, K, drafts, counts)

    for _ in range(50):  # numba compiles on the first call
        call()
    start = time.perf_counter()
    for _ in range(REPEATS):
        call()
    return (time.perf_counter() - start) / REPEATS * 1e6


def gpu_drafter_us(batch: list[list[int]]) -> float | None:
    """The micro phase's own timing (tasks/gemm/remote/ngram_gpu_bench.py), where a GPU is here."""
    import torch

    if not torch.cuda.is_available():
        return None
    from ngram_gpu_bench import drafter_us  # a remote script: its folder's modules import one another
    from vllm.v1.spec_decode.ngram_proposer_gpu import NgramGPUKernel

    return drafter_us(NgramGPUKernel._find_first_and_extract_all_n_parallel, batch, MIN_N, MAX_N, K, REPEATS // 4)


def realised_extra_ms(ledger: Path | None) -> dict[str, list[float]]:
    if ledger is None:
        return {}
    out: dict[str, list[float]] = {}
    for record in json.loads(ledger.read_text())["records"]:
        for name in ("spec_step_extra_ms", "spec_gpu_step_extra_ms"):
            value = (record.get("measured_inputs") or {}).get(name)
            if value is not None:
                out.setdefault(name, []).append(value)
    return out


def main() -> None:
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    recorded = contexts(Path(sys.argv[1]))
    print(f"# {len(recorded)} recorded requests, contexts {min(map(len, recorded))}-{max(map(len, recorded))} tokens")
    print("| sequences a step | CPU drafter µs a step | GPU drafter µs a step |")
    print("|---|---|---|")
    for size in (1, 2, 4, 8):
        batch = (recorded * size)[:size]
        gpu = gpu_drafter_us(batch)
        cpu = cpu_drafter_us(batch)
        cpu_text = "numba missing" if cpu is None else f"{cpu:.1f}"
        print(f"| {size} | {cpu_text} | {'no GPU here' if gpu is None else f'{gpu:.1f}'} |")
    for name, values in realised_extra_ms(Path(sys.argv[2]) if len(sys.argv) == 3 else None).items():
        print(
            f"# {name} measured by the experiments: {', '.join(f'{v:.3f}' for v in values)} ms"
            f" (median {statistics.median(values):.3f})"
        )


if __name__ == "__main__":
    main()
