"""Timing of a kernel on the host's accelerator (torch and stdlib only), shared by the GEMM and
fused-MoE microbenchmarks so both are measured exactly the same way.

A kernel is given as one zero-argument call per rotated copy of its operands (weights,
activations, routings), so the working set exceeds the last-level cache and caches do not
flatter small shapes. On CUDA the calls are captured in one CUDA graph and replayed, as vLLM
decodes (launch overhead out of the figure); eager launches are the fallback. On CPU:
perf_counter around a batch of calls. Each figure is the median over repeats.
"""

import argparse
import json
import statistics
import time

import torch


def cuda_micro_start(default_repeats, on_cpu):
    """A CUDA-only micro's start: its spec (the JSON file named on the command line) and --repeats,
    what it runs on, and, where there is no CUDA, ``on_cpu``: why it times nothing."""
    parser = argparse.ArgumentParser()
    parser.add_argument("spec")
    parser.add_argument("--repeats", type=int, default=default_repeats)
    args = parser.parse_args()
    with open(args.spec) as handle:
        spec = json.load(handle)
    info = {"device": "cuda" if torch.cuda.is_available() else "cpu", "torch": torch.__version__}
    if not torch.cuda.is_available():
        return spec, args.repeats, info, on_cpu
    info["device_name"] = torch.cuda.get_device_name()
    return spec, args.repeats, info, None


def timer(device):
    if device == "cuda":

        def measure(fn, calls):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1000 / calls
    else:

        def measure(fn, calls):
            started = time.perf_counter()
            for _ in range(calls):
                fn()
            return (time.perf_counter() - started) / calls

    return measure


def sample_seconds(fn, device, repeats, calls):
    """``repeats`` timings of ``calls`` calls each (seconds a call), after a warmup."""
    measure = timer(device)
    for _ in range(3):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return [measure(fn, calls) for _ in range(repeats)]


def median_seconds(fn, device, repeats, calls, spread=None):
    """The median of ``repeats`` timings; ``spread`` (a dict) receives their spread."""
    samples = sample_seconds(fn, device, repeats, calls)
    median = statistics.median(samples)
    if spread is not None:
        spread["samples"] = len(samples)
        spread["spread_pct"] = (max(samples) - min(samples)) / median * 100 if median else None
    return median


GROWTH_LIMIT = 2.0
"""A GEMM's time may grow with M by at most this times M's own ratio between two timed sizes."""
FALL_LIMIT = 3.0
"""... and may not fall by more than this factor as M grows: either is a measurement, not the kernel."""


def shape_outliers(timed):
    """Keys whose time is implausible beside the same GEMM at the neighbouring M: ``timed`` maps
    (m, rest...) keys to seconds. Growing M never makes a GEMM much faster, and a decode-size GEMM
    (weight-bound) grows more slowly than M: a time far off both is a bad run (the host busy, a
    clock change), measured again by the caller."""
    groups = {}
    for key, seconds in timed.items():
        if seconds:
            groups.setdefault(key[1:], []).append((key[0], seconds, key))
    suspects = set()
    for points in groups.values():
        points.sort(key=lambda point: point[0])
        for (m0, t0, key0), (m1, t1, key1) in zip(points, points[1:], strict=False):
            if t1 / t0 > max(FALL_LIMIT, GROWTH_LIMIT * m1 / m0):
                suspects.add(key1)
            elif t0 / t1 > FALL_LIMIT:
                suspects.add(key0)
    return suspects


def copy_ceiling_gbps(device, repeats):
    size = (1 << 30) if device == "cuda" else (256 << 20)
    src = torch.empty(size, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    seconds = median_seconds(lambda: dst.copy_(src), device, repeats, 5)
    return 2 * size / seconds / 1e9  # read + write


def captured(calls):
    """One CUDA graph of ``calls`` in order, after one warm run on a side stream."""
    stream = torch.cuda.Stream()
    # the operands were written on the current stream: the side stream waits for them
    # (without it a block table still being filled sent FlashAttention out of bounds)
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for fn in calls:
            fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for fn in calls:
            fn()
    return graph


def time_rotations(calls, device, repeats, do_bench=False, kernel_durations=False):
    """Seconds a call (median), with how it was timed; ``calls`` holds one closure per rotated copy.
    With ``do_bench`` on CUDA, the same calls timed by Triton too (do_bench for eager launches,
    do_bench_cudagraph for graph replays), as an independent check of our timing. With
    ``kernel_durations``, the graph's kernels as the profiler times them (``kernels_us``)."""
    copies = len(calls)
    state = {"i": 0}

    def call():
        i = state["i"] = (state["i"] + 1) % copies
        calls[i]()

    row = {}
    seconds = None
    if device == "cuda":
        try:  # CUDA graph replay: launch overhead out of the measurement, as vLLM decodes
            graph = captured(calls)
            seconds = median_seconds(graph.replay, device, repeats, 1, row) / copies
            row["timing"] = "CUDA events around CUDA graph replays"
            if kernel_durations:
                row["kernels_us"] = graph_kernel_us(graph.replay, copies)
        except Exception as err:  # noqa: BLE001 - fall back to eager launches
            row["graph_error"] = str(err).splitlines()[0][:200]
    batch = copies if device == "cuda" else max(1, min(copies, 4))
    if seconds is None:
        seconds = median_seconds(call, device, repeats, batch, row)
        row["timing"] = "CUDA events, eager launches" if device == "cuda" else "perf_counter, median of repeats"
    if do_bench and device == "cuda":
        import triton.testing

        row["eager_us"] = median_seconds(call, device, repeats, batch) * 1e6
        row["do_bench_us"] = triton.testing.do_bench(call, warmup=25, rep=200, return_mode="median") * 1e3
        if row["timing"].startswith("CUDA events around CUDA graph"):

            def graph_call():
                for fn in calls:
                    fn()

            row["do_bench_cudagraph_us"] = (
                triton.testing.do_bench_cudagraph(graph_call, rep=200, return_mode="median") * 1e3 / copies
            )
    return seconds, row


def cold_kernel_us(calls, before_each, device):
    """Each kernel's profiled µs a call with ``before_each`` run ahead of every call in the same
    CUDA graph: ``before_each`` evicts the L2 (and re-makes what the step's previous kernel leaves
    hot), so a call finds its operands where the server's layer finds them, after the rest of the
    model streamed through the cache. The profiled durations leave ``before_each``'s kernels out of
    a caller's sum by name. {"error": why} where the graph or the profiler fails."""
    if device != "cuda":
        return {"error": "CUDA only"}
    try:
        graph = captured([step for fn in calls for step in (before_each, fn)])
        return graph_kernel_us(graph.replay, len(calls))
    except Exception as err:  # noqa: BLE001 - a diagnostic pass: the warm timing stands without it
        return {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:120] if str(err) else ''}"}


def flush_bytes(device, floor=256 << 20):
    """Bytes that evict the L2: twice the device's L2 (torch reports it), at least ``floor``."""
    size = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) if device == "cuda" else 0
    return max(floor, 2 * size)


def graph_kernel_us(replay, copies):
    """Each kernel's µs a call (its profiled durations over ``copies`` calls a replay), as the server's
    trace measures kernels: a micro's graph-replay time a call holds the gaps between them too, so
    this is the figure to set beside a trace's kernel. {"error": why} where the profiler fails."""
    try:
        from torch.profiler import ProfilerActivity, profile

        replay()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                replay()
            torch.cuda.synchronize()
        out = {}
        for event in prof.key_averages():
            total = getattr(event, "self_device_time_total", None)
            if total is None:
                total = getattr(event, "self_cuda_time_total", 0.0)
            if total and total > 0:
                out[event.key] = total / (5 * copies)  # whole: its template arguments name the instantiation
        return out
    except Exception as err:  # noqa: BLE001 - a diagnostic: the timing stands without it
        return {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:120] if str(err) else ''}"}


def relative_error(out, reference):
    out, reference = out.float(), reference.float()
    return ((out - reference).norm() / reference.norm().clamp(min=1e-12)).item()


def _top_level_ops(calls, rounds, before_each=None):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(rounds):
            for fn in calls:
                if before_each is not None:
                    before_each()
                fn()
    by_name = {}
    for event in prof.events():
        if event.cpu_parent is None:
            by_name.setdefault(event.name, []).append(event.cpu_time_total)
    return {name: sorted(durations)[len(durations) // 2] for name, durations in by_name.items()}


def profiled_op_us(calls, rounds=20, cold_bytes=64 << 20):
    """CPU: the GEMM op as a torch.profiler trace records it (p50 of its events), the figure the
    server's trace gives each GEMM; warm (the op's operands cached, as in a tight loop) and cold
    (``cold_bytes`` written between calls, more than a last-level cache holds, so the weights come
    from memory). A CPU GEMM's time depends mostly on that cache state, and the server's op sits
    somewhere between: the two bracket it. The perf_counter figure also counts the Python wrapper
    around the op (vLLM's `onednn_mm` allocates the output and reshapes: separate ops, not GEMM
    time in a trace) and the dispatcher, which on small CPU GEMMs is most of a call.
    The op: the longest top-level op of a call. Returns (name, warm µs, cold µs)."""
    warm = _top_level_ops(calls, rounds)
    if not warm:
        return None, None, None
    name = max(warm, key=warm.__getitem__)
    flush = torch.empty(cold_bytes, dtype=torch.uint8)
    cold = _top_level_ops(calls[:4], max(2, rounds // 4), before_each=lambda: flush.add_(1))
    return name, warm[name], cold.get(name)
