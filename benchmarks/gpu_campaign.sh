#!/usr/bin/env bash
# A real campaign on a CUDA host (the lent H200) against real vLLM 0.26.0, unmodified code, run
# locally there (host.kind = "local"). Needs the payload of ../shared/gpu installed (install.sh)
# and its PYTHONPATH exported.
#
#   benchmarks/gpu_campaign.sh WORK OUT SHAPE [SHAPE...]
#     SHAPE: llama8b_bf16 | llama8b_w4a16 | qwen3moe_bf16 | kimik2_4layer_int4
#
# Each shape is a config.json with `--load-format dummy` (model-shaped random weights) beside
# the tokenizer of the project's tiny model (benchmarks/gpu_model_shapes.py). Writes one
# OUT/<shape>.tar.gz a shape: findings.md, todo.json, the campaign's and vLLM's logs, rank 0's trace.
# A shorter run: CONC_MAX (sweep's top concurrency, 16), GEMM_M (GEMM batch sizes, "[1, 8, 32]"),
# COMPARE_W4A16 (what-if W4A16 rows, true).
set -uo pipefail
WORK=$1; OUT=$2; shift 2
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONPATH="$ROOT:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$WORK/models" "$OUT"
[ -f "$WORK/tok/tokenizer.json" ] || python3 "$ROOT/tasks/model/remote/make_tiny_model.py" "$WORK/tok" >/dev/null
for shape in "$@"; do
  model="$WORK/models/$shape"
  python3 "$ROOT/benchmarks/gpu_model_shapes.py" "$WORK/tok" "$model" "$shape" || continue
  dir="$WORK/$shape"; mkdir -p "$dir"
  cat > "$dir/campaign.toml" <<TOML
[campaign]
name = "h200-$shape"
[host]
kind = "local"
python = "python3"
[service]
model = "$model"
tensor_parallel = 1
command = ["python3", "-m", "vllm.entrypoints.cli.main", "serve", "{model}", "--port", "{port}", "-tp", "{tp}",
           "--max-model-len", "2048", "--gpu-memory-utilization", "0.5", "--load-format", "dummy",
           "--profiler-config", "{profiler_config}"]
env = { VLLM_USE_FLASHINFER_SAMPLER = "0", HF_HUB_OFFLINE = "1", VLLM_NO_USAGE_STATS = "1" }
ready_deadline_s = 420
[macro]
single_stream_requests = 8
concurrency_max = ${CONC_MAX:-16}
requests_per_level = 32
[gemm]
batch_sizes = ${GEMM_M:-[1, 8, 32]}
compare_w4a16 = ${COMPARE_W4A16:-true}
repeats = 20
[allreduce]
nccl_variants = false
[profile]
requests = 4
output_tokens = 32
stop_timeout_s = 300
TOML
  started=$(date +%s)
  (cd "$dir" && python3 -m orchestrate resume) > "$OUT/$shape.log" 2>&1
  echo "$shape: exit $? in $(( $(date +%s) - started )) s"
  # One file a shape (the device returns few files): findings, todo file, logs, rank-0 trace.
  pack="$WORK/pack-$shape"; mkdir -p "$pack"
  cp "$dir/reports/h200-$shape/findings.md" "$dir/state/todo.json" "$OUT/$shape.log" "$pack/" 2>/dev/null
  tail -c 40000 "$dir/state/host/service/vllm.log" > "$pack/vllm.log.tail" 2>/dev/null
  cp "$dir"/state/artifacts/profile_capture/traces/*rank0*.pt.trace.json.gz "$pack/" 2>/dev/null
  tar -czf "$OUT/$shape.tar.gz" -C "$pack" . && rm -f "$OUT/$shape.log"
  grep -E "^\[|error|Error" "$pack/$shape.log" | tail -40
done
