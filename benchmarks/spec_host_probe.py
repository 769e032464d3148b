"""What a speculative decode step costs on this host when the device has little to do (a probe, run on
the GPU host before or beside a campaign; not yet a campaign input).

The GPU n-gram drafter's experiments show the variant's steps host-bound (Kimi-K2 run 4's trace: the GPU
busy 42% of the variant's span against 93% of the base's), and the step cost the campaign assumes (0) is
where its speculative predictions miss. The host's work a step should not depend on the model's widths:
it is vLLM's scheduling, input preparation, the drafter's bookkeeping and, in the steps whose query
lengths differ (piecewise CUDA graphs), attention launched eagerly once a layer. So this serves the
campaign's shape cut thin (every width small, the layer count, attention heads, experts and routing
kept) with the campaign's own server flags, once as it is and once with the option's
`--speculative-config`, and times single-stream and concurrent decode with the campaign's load
generator. A step's wall on the thin model is the host's work a step (or the thin model's device time,
if longer: the script prints both sides' step so the reader can see which). A real model's speculative
step then costs max(its device work, this host work): the rows to compare are the experiment's
`spec_gpu_step_extra_ms` (its ledger) against max(0, thin spec step - (TPOT + verify extra)).

usage: python3 benchmarks/spec_host_probe.py TOKENIZER_DIR WORK SHAPE [LEVELS]
SHAPE: qwen3moe_bf16, llama8b_bf16 or kimik2_4layer_int4 (benchmarks/gpu_model_shapes.py); LEVELS: 1,2,4
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tasks.macro.metrics import spec_decode_view, tpot_s  # noqa: E402
from tasks.model import TOKENIZER_SIZE  # noqa: E402

SPEC = {"method": "ngram_gpu", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
# widths cut to a few hundred (multiples of the int4 group and Marlin's tiles); layers, heads, experts kept
THIN = {
    "hidden_size": 512,
    "intermediate_size": 512,
    "moe_intermediate_size": 256,
    "q_lora_rank": 512,
}
PORT = 8791


def thin_model(tokenizer: Path, out: Path, shape: str) -> dict:
    subprocess.run([sys.executable, str(ROOT / "benchmarks/gpu_model_shapes.py"), tokenizer, out, shape], check=True)
    config = json.loads((out / "config.json").read_text())
    config.update({key: value for key, value in THIN.items() if key in config})
    (out / "config.json").write_text(json.dumps(config, indent=1))
    return config


def serve(model: Path, spec: bool, log: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", str(model), "--port", str(PORT)]
    command += ["--max-model-len", "2048", "--gpu-memory-utilization", "0.3", "--load-format", "dummy"]
    if spec:
        command += ["--speculative-config", json.dumps(SPEC)]
    env = os.environ | {"VLLM_USE_FLASHINFER_SAMPLER": "0", "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1"}
    server = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, start_new_session=True)
    deadline = time.time() + 420
    while time.time() < deadline:
        if server.poll() is not None:
            sys.exit(f"the server exited ({server.returncode}): {log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=2):
                return server
        except OSError:
            time.sleep(2)
    sys.exit(f"the server was not ready in 420 s: {log}")


def load(model: Path, concurrency: int, vocab: int) -> dict:
    command = [sys.executable, str(ROOT / "tasks/macro/remote/loadgen.py"), "--port", str(PORT), "--model", str(model)]
    command += ["--concurrency", str(concurrency), "--requests", str(8 * concurrency), "--warmup", str(concurrency)]
    command += ["--input-tokens", "64", "--output-tokens", "64", "--vocab", str(vocab)]
    return json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)


def figures(run: dict) -> dict:
    tpots = [t for t in (tpot_s(r) for r in run["requests"] if not r.get("error")) if t is not None]
    view = spec_decode_view(run.get("server_metrics_delta") or {})
    tokens_a_step = view["mean_acceptance_length"] if view else 1.0
    tpot_ms = median(tpots) * 1e3
    return {"tpot_ms": tpot_ms, "tokens_a_step": tokens_a_step, "step_ms": tpot_ms * tokens_a_step}


def main() -> None:
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__.split("usage: ")[1].strip())
    tokenizer, work, shape = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    levels = [int(c) for c in (sys.argv[4] if len(sys.argv) == 5 else "1,2,4").split(",")]
    model = work / f"{shape}_thin"
    config = thin_model(tokenizer, model, shape)
    # random prompts valid for the model and its tokenizer, as the campaign's (ModelFacts.prompt_vocab)
    counted = subprocess.run([sys.executable, "-c", TOKENIZER_SIZE, str(model)], capture_output=True, text=True)
    vocab = min(config["vocab_size"], int(counted.stdout.strip() or config["vocab_size"]))
    rows: dict[str, dict[int, dict]] = {}
    for name, spec in (("base", False), ("spec", True)):
        started = time.time()
        server = serve(model, spec, work / f"{shape}_thin_{name}.log")
        print(f"# {name}: ready in {time.time() - started:.0f} s", flush=True)
        try:
            rows[name] = {c: figures(load(model, c, vocab)) for c in levels}
        finally:
            os.killpg(server.pid, 15)
            server.wait(60)
    print(f"# {shape} thin ({', '.join(f'{k} {config[k]}' for k in THIN if k in config)}), {SPEC}")
    print("| level | base step ms | spec TPOT ms | tokens a step | spec step ms | spec step - base step ms |")
    print("|---|---|---|---|---|---|")
    for c in levels:
        base, spec = rows["base"][c], rows["spec"][c]
        print(
            f"| c={c} | {base['step_ms']:.3f} | {spec['tpot_ms']:.3f} | {spec['tokens_a_step']:.2f} "
            f"| {spec['step_ms']:.3f} | {spec['step_ms'] - base['step_ms']:+.3f} |"
        )
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
