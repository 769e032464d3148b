"""Capture a small real GPU trace (torch.profiler, CUDA) shaped like a vLLM decode run.

vLLM is not installed on the lent H200, so this drives real CUDA kernels (cuBLAS GEMMs, torch's
int4 GEMM, SDPA attention, norms, sampling) under vLLM's own step annotation names
(`execute_context_{n}({t})_generation_{m}({t})`), and a 1-rank NCCL all-reduce per layer half,
so the analyzer meets a real Kineto GPU trace. Kept small for tests/data.
usage: python3 benchmarks/make_gpu_trace.py OUT.json.gz
"""

import gzip
import os
import shutil
import sys
import tempfile

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, record_function


def main() -> None:
    out = sys.argv[1]
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("nccl", rank=0, world_size=1)
    torch.manual_seed(0)
    dev = "cuda"
    hidden, inter, heads, head_dim, vocab, layers, batch = 1024, 2048, 8, 128, 8192, 2, 8
    w = {
        name: torch.randn(shape, device=dev, dtype=torch.bfloat16) * 0.02
        for name, shape in {
            "qkv": (3 * heads * head_dim, hidden),
            "o": (hidden, heads * head_dim),
            "gate_up": (2 * inter, hidden),
            "lm_head": (vocab, hidden),
        }.items()
    }
    q4 = torch.randint(0, 16, (hidden, inter), device=dev, dtype=torch.int32)
    packed = torch.ops.aten._convert_weight_to_int4pack((q4[:, ::2] << 4 | q4[:, 1::2]).to(torch.uint8), 8)
    scales = torch.ones(inter // 128, hidden, 2, device=dev, dtype=torch.bfloat16)
    kv = torch.randn(batch, heads, 256, head_dim, device=dev, dtype=torch.bfloat16)

    def step(tokens: int, name: str) -> None:
        with record_function(name):
            x = torch.randn(tokens, hidden, device=dev, dtype=torch.bfloat16)
            for _ in range(layers):
                h = torch.nn.functional.rms_norm(x, (hidden,))
                qkv = torch.nn.functional.linear(h, w["qkv"])
                q = qkv[:, : heads * head_dim].reshape(tokens, heads, 1, head_dim)[:batch]
                attn = torch.nn.functional.scaled_dot_product_attention(
                    q.transpose(0, 0), kv[: q.shape[0]], kv[: q.shape[0]]
                )
                o = torch.nn.functional.linear(attn.reshape(q.shape[0], -1), w["o"])
                dist.all_reduce(o)
                x = x[: o.shape[0]] + o
                gu = torch.nn.functional.linear(torch.nn.functional.rms_norm(x, (hidden,)), w["gate_up"])
                act = torch.nn.functional.silu(gu[:, :inter]) * gu[:, inter:]
                down = torch.ops.aten._weight_int4pack_mm(act, packed, 128, scales)
                dist.all_reduce(down)
                x = x + down
            logits = torch.nn.functional.linear(x, w["lm_head"])
            torch.argmax(logits, dim=-1)
        torch.cuda.synchronize()

    for _ in range(3):
        step(batch, "warmup")
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "trace.json")
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            step(batch, f"execute_context_1({batch})_generation_0(0)")
            for _ in range(6):
                step(batch, f"execute_context_0(0)_generation_{batch}({batch})")
            step(batch, "execute_context_0(0)_generation_0(0)")
        prof.export_chrome_trace(path)
        with open(path, "rb") as src, gzip.open(out, "wb") as dst:
            shutil.copyfileobj(src, dst)
    print(f"wrote {out} ({os.path.getsize(out)} bytes)")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
