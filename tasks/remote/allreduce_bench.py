"""All-reduce latency and bandwidth across the tensor-parallel ranks (torch and stdlib only).

Launched with torchrun (one process a rank): NCCL on GPUs, gloo on CPU. For each size: warmup,
then the median over repeats of (elapsed / iterations) for back-to-back all-reduces, each
repeat started after a barrier. algbw = bytes / time; busbw = algbw x 2(n-1)/n (nccl-tests).
Rank 0 prints one JSON document.

usage: torchrun --nproc-per-node N allreduce_bench.py --sizes B1,B2,... [--iterations I]
"""

import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", required=True, help="comma-separated message sizes in bytes")
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--dtype", default="bfloat16")
    args = parser.parse_args()
    use_cuda = torch.cuda.is_available() and os.environ.get("ALLREDUCE_DEVICE", "auto") != "cpu"
    backend = "nccl" if use_cuda else "gloo"
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    if use_cuda:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend)
    device = "cuda" if use_cuda else "cpu"
    dtype = getattr(torch, args.dtype)
    element = torch.tensor([], dtype=dtype).element_size()
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        numel = max(1, size // element)
        tensor = torch.ones(numel, dtype=dtype, device=device)
        for _ in range(5):
            dist.all_reduce(tensor)
        if use_cuda:
            torch.cuda.synchronize()
        samples = []
        for _ in range(args.repeats):
            dist.barrier()
            if use_cuda:
                torch.cuda.synchronize()
            started = time.perf_counter()
            for _ in range(args.iterations):
                dist.all_reduce(tensor)
            if use_cuda:
                torch.cuda.synchronize()
            samples.append((time.perf_counter() - started) / args.iterations)
        # Every rank's median; the slowest rank sets the collective's pace.
        mine = torch.tensor([statistics.median(samples)], dtype=torch.float64)
        gathered = [torch.zeros(1, dtype=torch.float64) for _ in range(world)]
        if use_cuda:
            mine, gathered = mine.cuda(), [g.cuda() for g in gathered]
        dist.all_gather(gathered, mine)
        seconds = max(float(g.item()) for g in gathered)
        nbytes = numel * element
        algbw = nbytes / seconds / 1e9
        rows.append({"bytes": nbytes, "latency_us": seconds * 1e6, "algbw_gbps": algbw,
                     "busbw_gbps": algbw * 2 * (world - 1) / world,
                     "per_rank_latency_us": [float(g.item()) * 1e6 for g in gathered]})
    if rank == 0:
        print(json.dumps({"backend": backend, "world_size": world, "dtype": args.dtype,
                          "iterations": args.iterations, "repeats": args.repeats,
                          "nccl_algo": os.environ.get("NCCL_ALGO"),
                          "nccl_proto": os.environ.get("NCCL_PROTO"),
                          "torch": torch.__version__, "rows": rows}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
