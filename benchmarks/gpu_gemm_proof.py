"""GPU proof for phase 2a: the GEMM phase's script at a real model's TP=8 per-rank shapes.

Runs on a CUDA host (the lent H200): derives the shapes with tasks.model.shapes (Kimi-K2: int4
experts, plus a W4A16 variant of every bf16 layer; DeepSeek-V3: FP8 with 128 x 128 blocks),
runs tasks/gemm/remote/gemm_bench.py with --compare-do-bench and prints a table: our µs vs
triton.testing.do_bench's, and % of the copy ceiling measured in the same run.
usage: python3 benchmarks/gpu_gemm_proof.py OUT_JSON [MODEL] [W4A16_KERNEL]
       python3 benchmarks/gpu_gemm_proof.py SAVED_JSON --report
MODEL: kimi_k2_thinking | deepseek_v3 (TP=8) | llama_3_1_8b_w4a16 | qwen3moe_bf16 | kimik2_4layer_int4 (TP=1)
W4A16_KERNEL: auto (default: Machete on Hopper, then Marlin) | machete | marlin
(llama_3_1_8b_w4a16: Llama-3.1-8B at TP=1 with int4 group-128 weights, as vLLM serves it with Machete;
qwen3moe_bf16, kimik2_4layer_int4: the campaign shapes of benchmarks/gpu_model_shapes.py, whose
`experts_fused` rows time vLLM's Triton fused MoE and Marlin-MoE.)
"""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.gpu_model_shapes import shape as campaign_shape  # noqa: E402
from tasks.model.shapes import derive_shapes  # noqa: E402


def main() -> None:
    out = Path(sys.argv[1])
    if len(sys.argv) > 2 and sys.argv[2] == "--report":  # print the table of a saved run again
        report(json.loads(out.read_text()))
        return
    model = sys.argv[2] if len(sys.argv) > 2 else "kimi_k2_thinking"
    kernel = sys.argv[3] if len(sys.argv) > 3 else "auto"
    tp = 8
    if model in ("qwen3moe_bf16", "kimik2_4layer_int4"):
        config, tp = campaign_shape(model, {}), 1
    elif model == "llama_3_1_8b_w4a16":
        config = json.loads((ROOT / "tests/data/configs/llama_3_1_8b.json").read_text())
        config["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 128}
        tp = 1
    else:
        config = json.loads((ROOT / f"tests/data/configs/{model}.json").read_text())
    derived = derive_shapes(config, tp, [1, 8, 32, 128], f"{model}.json")
    shapes = [row for row in derived["shapes"] if row["name"] != "moe_gate"]
    if derived["weight_dtype"] == "w4a16":
        shapes += [
            {**row, "dtype": "w4a16", "name": row["name"] + " (as W4A16)"} for row in shapes if row["dtype"] == "bf16"
        ]
    fp8_block = derived["group_size"] if derived["weight_dtype"] == "fp8" else 128
    int4_group = derived["group_size"] if derived["weight_dtype"] == "w4a16" else 128
    shapes_path = out.with_suffix(".shapes.json")
    shapes_path.write_text(json.dumps(shapes))
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tasks/gemm/remote/gemm_bench.py"),
            str(shapes_path),
            "--repeats",
            "20",
            "--group-size",
            str(int4_group),
            "--fp8-block",
            str(fp8_block),
            "--w4a16-kernel",
            kernel,
            "--compare-do-bench",
        ],
        capture_output=True,
        text=True,
    )
    if result.returncode:
        print(result.stderr[-3000:])
        sys.exit(1)
    document = json.loads(result.stdout.strip().splitlines()[-1])
    out.write_text(json.dumps(document, indent=1))
    report(document)


def report(document: dict) -> None:
    print(
        f"device {document['info']['device_name']}, torch {document['info']['torch']},"
        f" copy ceiling {document['copy_ceiling_gbps']:.0f} GB/s"
    )
    print(
        f"{'layer':30} {'M':>4} {'K':>6} {'N':>6} {'dtype':6} {'graph us':>8} {'dbcg us':>8} {'diff%':>6}"
        f" {'eager us':>8} {'db us':>8} {'diff%':>6} {'GB/s':>6} {'%copy':>6}  kernel"
    )
    diffs_graph, diffs_eager = [], []
    for row in document["rows"]:
        if "us" not in row:
            print(
                f"{row['name'][:30]:30} {row['m']:>4} {row['k']:>6} {row['n']:>6} {row['dtype']:6} skipped: {row.get('skipped')}"
            )
            continue
        graph_ref, eager_ref = row.get("do_bench_cudagraph_us"), row.get("do_bench_us")
        d_graph = (row["us"] - graph_ref) / graph_ref * 100 if graph_ref else float("nan")
        d_eager = (row["eager_us"] - eager_ref) / eager_ref * 100 if eager_ref else float("nan")
        diffs_graph.append(abs(d_graph))
        diffs_eager.append(abs(d_eager))
        print(
            f"{row['name'][:30]:30} {row['m']:>4} {row['k']:>6} {row['n']:>6} {row['dtype']:6} {row['us']:8.1f}"
            f" {graph_ref or float('nan'):8.1f} {d_graph:6.1f} {row['eager_us']:8.1f} {eager_ref:8.1f}"
            f" {d_eager:6.1f} {row['gbps']:6.0f} {row['pct_of_copy_ceiling']:6.1f}  {row['kernel'][:40]}"
        )
    import statistics

    print(
        f"median |diff| vs do_bench_cudagraph: {statistics.median(diffs_graph):.1f}%;"
        f" vs do_bench (eager): {statistics.median(diffs_eager):.1f}%;"
        f" rows within 5%: {sum(d <= 5 for d in diffs_graph)}/{len(diffs_graph)} (graph),"
        f" {sum(d <= 5 for d in diffs_eager)}/{len(diffs_eager)} (eager)"
    )


if __name__ == "__main__":
    main()
