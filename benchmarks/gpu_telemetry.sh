#!/usr/bin/env bash
# Issue 33's H200 check: a serving campaign with GPU telemetry (NVML), the Llama-3.1-8B shape in
# bf16 with dummy weights at TP=1 (vLLM 0.26.0 from ../shared/gpu), then the energy counter against
# mean power x time under load (benchmarks/telemetry_check.py).
#
#   benchmarks/gpu_telemetry.sh start WORK            the campaign in the background (setsid)
#   benchmarks/gpu_telemetry.sh wait WORK OUT SECONDS  waits, then copies its findings and todo file to OUT
set -uo pipefail
what=$1; WORK=$2
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONPATH="$ROOT:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
dir="$WORK/telemetry"
if [ "$what" = start ]; then
  mkdir -p "$WORK/models" "$dir"
  [ -f "$WORK/tok/tokenizer.json" ] || python3 "$ROOT/tasks/model/remote/make_tiny_model.py" "$WORK/tok" >/dev/null
  python3 "$ROOT/benchmarks/gpu_model_shapes.py" "$WORK/tok" "$WORK/models/llama8b_bf16" llama8b_bf16 || exit 1
  cat > "$dir/campaign.toml" <<TOML
[campaign]
name = "h200-telemetry"
phases = ["macro"]
[host]
kind = "local"
python = "python3"
[service]
model = "$WORK/models/llama8b_bf16"
tensor_parallel = 1
command = ["python3", "-m", "vllm.entrypoints.cli.main", "serve", "{model}", "--port", "{port}", "-tp", "{tp}",
           "--max-model-len", "2048", "--gpu-memory-utilization", "0.5", "--load-format", "dummy",
           "--enable-prompt-tokens-details"]
env = { VLLM_USE_FLASHINFER_SAMPLER = "0", HF_HUB_OFFLINE = "1", VLLM_NO_USAGE_STATS = "1" }
ready_deadline_s = 420
[macro]
input_tokens = 256
output_tokens = 128
single_stream_requests = 8
concurrency_max = 32
requests_per_level = 64
repeats = 2
telemetry_interval_s = 0.1
TOML
  (cd "$dir" && setsid nohup python3 -m orchestrate resume >> "$dir/campaign.log" 2>&1 &)
  sleep 2; echo "started: $(pgrep -f "[o]rchestrate resume" | tr '\n' ' ')"; tail -3 "$dir/campaign.log"
  exit 0
fi
OUT=$3; LIMIT=${4:-500}
end=$(( $(date +%s) + LIMIT ))
running() { pgrep -f "[o]rchestrate resume" >/dev/null; }
while running && [ "$(date +%s)" -lt "$end" ]; do sleep 5; done
if running; then echo "still running"; grep -aE "^\[" "$dir/campaign.log" | tail -15; exit 0; fi
echo "campaign finished"; grep -aE "^\[.*(completed|failed|error)" "$dir/campaign.log" | tail -20
cp "$dir"/reports/h200-telemetry/findings.md "$dir"/reports/h200-telemetry/power.png "$dir/state/todo.json" "$dir/campaign.log" "$OUT/" 2>/dev/null
ls -la "$OUT"
