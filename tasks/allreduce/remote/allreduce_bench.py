"""All-reduce latency and bandwidth across the tensor-parallel ranks (torch and stdlib only).

Launched with torchrun (one process a rank): NCCL on GPUs, gloo on CPU. For each size: warmup,
then the median over repeats of (elapsed / iterations) for back-to-back all-reduces, each
repeat started after a barrier. algbw = bytes / time; busbw = algbw x 2(n-1)/n (nccl-tests).

On CPU, vLLM's workers all-reduce through their own shared memory (`_C::shm_allreduce`) where
vLLM's CPU library for the CPU has it (its AVX-512 builds; with the AVX2 one they use gloo, and the
bench says why it timed no shm rows). Where it is there, that op is set up the
way vLLM's CpuCommunicator does it, checked for a correct sum, and timed the same way
(`vllm_shm_rows`), so the per-step prediction can use the path the server really takes.
Rank 0 prints one JSON document.

usage: torchrun --nproc-per-node N allreduce_bench.py --sizes B1,B2,... [--iterations I]
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

try:
    from host_progress import Reporter  # shipped beside this script (tasks/host_progress.py)
except ImportError:  # run by hand without it: no progress lines
    Reporter = None


COLLECTIVE_ENV_PREFIXES = ("NCCL_", "TORCH_SYMM_MEM_", "NVSHMEM_", "CUDA_VISIBLE_DEVICES")


SHM_SEGMENT = {"name": None}
"""The vLLM shared-memory segments' base name once this rank set its manager up (each rank's is
/dev/shm/<name>_<rank>)."""


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
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = time_sizes(dist.all_reduce, sizes, dtype, device, world, args, f"{backend} all-reduce")
    document = {
        "backend": backend,
        "world_size": world,
        "dtype": args.dtype,
        "iterations": args.iterations,
        "repeats": args.repeats,
        "nccl_algo": os.environ.get("NCCL_ALGO"),
        "nccl_proto": os.environ.get("NCCL_PROTO"),
        # The communication settings these timings were made under, as the ranks saw them.
        "collective_env": {
            key: value for key, value in sorted(os.environ.items()) if key.startswith(COLLECTIVE_ENV_PREFIXES)
        },
        "torch": torch.__version__,
        "rows": rows,
    }
    if use_cuda and world == 1:
        # Seen on an H200 (torch 2.11): at one rank the all-reduce launches nothing, the captured
        # graph is empty ("The CUDA Graph is empty") and a replay "took" 0.3 µs: no figure.
        document["graph_unavailable"] = "one rank: the all-reduce does no work, so a CUDA graph captures nothing"
    elif use_cuda:
        # vLLM replays its decode steps as CUDA graphs: the same calls captured once and replayed,
        # so no launch overhead is in the server's per-call time. Timed beside the eager loop.
        try:
            check_graph_sums(dist.all_reduce, dtype, rank, world)
            document["graph_rows"] = time_sizes(
                dist.all_reduce, sizes, dtype, device, world, args, f"{backend} all-reduce in a CUDA graph", graph=True
            )
        except Exception as err:  # noqa: BLE001 - capture can fail on a build or setting; say why
            document["graph_unavailable"] = f"{type(err).__name__}: {str(err)[:200]}"
    else:
        shm_all_reduce, why_not = vllm_shm_all_reduce(rank, world)
        if shm_all_reduce is None:
            document["vllm_shm_unavailable"] = why_not
        else:
            document["vllm_shm_rows"] = time_sizes(
                shm_all_reduce, sizes, dtype, device, world, args, "vLLM shm all-reduce"
            )
    if rank == 0:
        print(json.dumps(document))
    if SHM_SEGMENT["name"] is None:
        dist.destroy_process_group()
        return
    # vLLM's shm manager neither removes its segment (4 MB in /dev/shm a rank, every run) nor
    # ends its thread: at exit a rank aborted now and then ("terminate called without an active
    # exception", SIGABRT after the document was printed: 1 run in 15 here). Each rank removes its
    # segment once both are done with them and leaves without the C++ destructors.
    dist.barrier()
    try:
        os.unlink(f"/dev/shm/{SHM_SEGMENT['name']}_{rank}")
    except OSError:
        pass
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def vllm_shm_all_reduce(rank, world):
    """vLLM's CPU shared-memory all-reduce, set up as vllm's CpuCommunicator does; checked to
    sum correctly. Returns (all_reduce(tensor), None) or (None, why it is unavailable)."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    if local != world:
        # Shared memory exists within a host only; vLLM disables its SHM communicator then too.
        return None, f"ranks span {world // max(local, 1)} nodes: shared memory works within a node only"
    try:
        # vLLM's own choice of its CPU library by the CPU's instruction sets (vllm._C needs AVX-512
        # with BF16: importing it elsewhere dies of SIGILL; _C_AVX2 and _C_AVX512 register torch.ops._C too)
        from vllm.platforms.cpu import CpuPlatform

        CpuPlatform.import_kernels()
    except Exception as err:  # noqa: BLE001 - any import failure means: not available here
        return None, f"vLLM's CPU kernels not importable: {type(err).__name__}: {str(err)[:150]}"
    ops = torch.ops._C
    if not (hasattr(ops, "init_shm_manager") and hasattr(ops, "shm_allreduce")):
        isa = "AVX-512" if torch.cpu._is_avx512_supported() else "AVX2"
        return (
            None,
            f"vLLM's CPU library for this CPU ({isa}) has no shared-memory all-reduce; vLLM's server uses gloo then too",
        )
    threads = torch.tensor([torch.get_num_threads()], dtype=torch.int64)
    dist.all_reduce(threads, op=dist.ReduceOp.MIN)
    name = f"orchestrate-{os.environ.get('MASTER_PORT', '0')}-{os.getppid()}-cpushm"
    handle = ops.init_shm_manager(name, world, rank, int(threads.item()))
    SHM_SEGMENT["name"] = name
    dist.barrier()
    ops.join_shm_manager(handle, name)
    dist.barrier()

    def all_reduce(tensor):
        ops.shm_allreduce(handle, tensor)

    probe = torch.full((1024,), float(rank + 1), dtype=torch.bfloat16)
    all_reduce(probe)
    if not bool((probe == world * (world + 1) / 2).all()):
        return None, "vLLM's shm_allreduce returned a wrong sum here"
    return all_reduce, None


def time_sizes(all_reduce, sizes, dtype, device, world, args, label, graph=False):
    element = torch.tensor([], dtype=dtype).element_size()
    report = Reporter() if Reporter is not None and dist.get_rank() == 0 else None
    use_cuda = device == "cuda"
    rows = []
    for size in sizes:
        numel = max(1, size // element)
        tensor = torch.ones(numel, dtype=dtype, device=device)
        for _ in range(5):
            all_reduce(tensor)
        if use_cuda:
            torch.cuda.synchronize()
        calls = calls_of(all_reduce, tensor, args.iterations, graph)
        samples = []
        for _ in range(args.repeats):
            dist.barrier()
            if use_cuda:
                torch.cuda.synchronize()
            started = time.perf_counter()
            calls()
            if use_cuda:
                torch.cuda.synchronize()
            samples.append((time.perf_counter() - started) / args.iterations)
        # Every rank's median (and its repeats' min and max); the slowest rank sets the pace.
        mine = torch.tensor([statistics.median(samples), min(samples), max(samples)], dtype=torch.float64)
        gathered = [torch.zeros(3, dtype=torch.float64) for _ in range(world)]
        if use_cuda:
            mine, gathered = mine.cuda(), [g.cuda() for g in gathered]
        dist.all_gather(gathered, mine)
        slowest = max((g.tolist() for g in gathered), key=lambda v: v[0])
        seconds = slowest[0]
        nbytes = numel * element
        algbw = nbytes / seconds / 1e9
        rows.append(
            {
                "bytes": nbytes,
                "latency_us": seconds * 1e6,
                "algbw_gbps": algbw,
                "busbw_gbps": algbw * 2 * (world - 1) / world,
                "per_rank_latency_us": [float(g[0].item()) * 1e6 for g in gathered],
                "repeats": len(samples),
                "spread_pct": (slowest[2] - slowest[1]) / seconds * 100,
            }
        )
        if report is not None:
            report(label, len(rows), len(sizes), "sizes", f"{nbytes:,} B: {seconds * 1e6:,.1f} µs")
    return rows


def check_graph_sums(all_reduce, dtype, rank, world):
    """An all-reduce captured in a CUDA graph and replayed sums every rank's values: a capture
    that recorded nothing (or the wrong stream) would time an empty graph."""
    probe = torch.empty(1024, dtype=dtype, device="cuda")
    all_reduce(probe)  # warm: the communicator exists before the capture
    torch.cuda.synchronize()
    captured = torch.cuda.CUDAGraph()
    with torch.cuda.graph(captured):
        all_reduce(probe)
    probe.fill_(rank + 1)
    captured.replay()
    torch.cuda.synchronize()
    if not bool((probe == world * (world + 1) / 2).all()):
        raise RuntimeError("an all-reduce replayed from a CUDA graph returned a wrong sum")


def calls_of(all_reduce, tensor, iterations, graph):
    """One timed repeat: ``iterations`` back-to-back all-reduces, launched one by one, or captured
    once in a CUDA graph (after the eager warm-up, so the communicator exists) and replayed."""
    if not graph:

        def eager():
            for _ in range(iterations):
                all_reduce(tensor)

        return eager
    captured = torch.cuda.CUDAGraph()
    with torch.cuda.graph(captured):
        for _ in range(iterations):
            all_reduce(tensor)
    torch.cuda.synchronize()
    captured.replay()  # once untimed: the first replay uploads the graph
    torch.cuda.synchronize()
    return captured.replay


if __name__ == "__main__":
    main()
