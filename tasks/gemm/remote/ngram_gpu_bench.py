"""vLLM's GPU n-gram drafter (`ngram_gpu`) timed a decode step on this host, over the campaign's own
recorded requests: the `speculative_decoding_gpu` option's step cost that the campaign can measure before
its experiment relaunches the server.

usage: ngram_gpu_bench.py SPEC_JSON [--repeats N]
SPEC_JSON: {"contexts": [[token ids: a request's prompt and output]], "sequences": [1, 2, 4],
            "min_n", "max_n", "k"}

Each point batches that many recorded contexts (repeated where there are fewer) and times the drafter's
suffix search (`NgramGPUKernel._find_first_and_extract_all_n_parallel`, as vLLM 0.26's ngram_gpu proposer
calls it once a step) back to back between two CUDA events: the wall a step of drafting holds the stream,
its host launches included, since the search is many small kernels whose launches outlast their work
(650-1670 µs a step on H100 hosts, flat from 1 to 8 sequences; the experiments then measured the whole
speculative step's extra at 1.24-3.0x it over nine campaigns). It is the part of that step cost this
campaign can time; the rejection sampler and the GPU waiting on the host's input preparation are not
reproduced, so the prediction it feeds stays an upper bound on the gain, tighter than with the cost at 0.
"""

from __future__ import annotations

import json

import torch
from bench_timing import cuda_micro_start


def drafter_us(find, batch: list[list[int]], min_n: int, max_n: int, k: int, repeats: int) -> float:
    width = max(map(len, batch))
    ids = torch.tensor([tokens + [0] * (width - len(tokens)) for tokens in batch], device="cuda")
    lengths = torch.tensor([len(tokens) for tokens in batch], device="cuda")
    for _ in range(20):
        find(None, ids, lengths, min_n, max_n, k)
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(repeats):
        find(None, ids, lengths, min_n, max_n, k)
    end.record()
    torch.cuda.synchronize()
    return begin.elapsed_time(end) / repeats * 1000


def main() -> None:
    spec, repeats, info, skipped = cuda_micro_start(500, "CUDA only: the GPU n-gram drafter runs on a GPU")
    if skipped is None:
        try:
            from vllm.v1.spec_decode.ngram_proposer_gpu import NgramGPUKernel

            find = NgramGPUKernel._find_first_and_extract_all_n_parallel
        except Exception as err:  # noqa: BLE001 - no vLLM, or a vLLM whose drafter moved
            skipped = f"vLLM's GPU n-gram drafter unavailable ({type(err).__name__}: {str(err)[:160]})"
    rows = []
    for sequences in spec["sequences"]:
        row = {"sequences": sequences, "min_n": spec["min_n"], "max_n": spec["max_n"], "k": spec["k"]}
        if skipped:
            rows.append({**row, "skipped": skipped})
            continue
        batch = (spec["contexts"] * sequences)[:sequences]
        try:
            row["us"] = drafter_us(find, batch, spec["min_n"], spec["max_n"], spec["k"], repeats)
        except Exception as err:  # noqa: BLE001 - the row says why
            row["skipped"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
        rows.append(row)
    print(json.dumps({"info": info, "drafter_rows": rows}))


if __name__ == "__main__":
    main()
