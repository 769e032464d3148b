#!/usr/bin/env bash
# The campaign checking its own advice on a CUDA host (the lent H200, vLLM 0.26.0 from
# ../shared/gpu): the Llama-3.1-8B shape in bf16, dummy weights, TP=1, with
# `auto_experiments = true` (the options the decision record calls for, with their rules'
# apply: n-gram speculative decoding with the GPU drafter) and FP8 KV and W4A16 listed (W4A16 needs a checkpoint:
# the compressed-tensors W4A16 shape, which vLLM runs with Machete).
#
#   benchmarks/gpu_experiments.sh start WORK    the campaign in the background (setsid), returns
#     (MODE=fp8: no auto, only the FP8 KV-cache experiment, which auto leaves out below the bar;
#      MODE=spec: no auto, only the GPU n-gram drafter's experiment: about 9 minutes where device time is short;
#      MODE=all: no auto, auto's three listed with the GPU drafter first, then W4A16, then FP8 KV;
#      MODE=measured: no auto, W4A16 then FP8 KV: the two whose every input the campaign measures before
#      them, about 4 minutes less than all where device time is short)
#   benchmarks/gpu_experiments.sh wait WORK OUT SECONDS   waits for it, then packs OUT/experiments.tar.gz
#     (without SHAPE: the folder under WORK the campaign was last started in)
#     (still running at SECONDS: OUT/partial.tar.gz, the todo file and log so far; its pack step runs
#      benchmarks that import vLLM: give it the PYTHONPATH start had, or they print ModuleNotFoundError)
#
# SHAPE=qwen3moe_bf16 (default llama8b_bf16): the Qwen3-30B-A3B shape, with FP8 KV and W4A16
# (qwen3moe_w4a16: Marlin MoE, needs the payload's c3) listed and auto adding the rest;
# SHAPE=kimik2_4layer_int4: the Kimi-K2 shape (MLA, int4 Marlin MoE), FP8 KV listed, no W4A16 twin.
# GPU_MEM=0.9: the server's --gpu-memory-utilization (0.5 by default; the Qwen3-MoE shape's 61 GB of
# bf16 weights need 0.9 on an 80 GB H100).
# PROFILE_CONC=2: the profiler's capture at that many requests in flight (1 by default): the decision record's
# level, with the trace's kernels at that batch.
# LEDGER=FILE: an earlier campaign's ledger.json put in the reports folder first, so the inputs it
# measured on this hardware, shape and vLLM stand in for the assumptions (a second campaign).
#
# The payload's chunks (../shared/gpu, kept in the git-ignored .gpu/chunks) go one a call, with this tree,
# under the 64 MiB a call carries: with the tree above 12 MiB, c1 (52 MiB) no longer fits; split it
# (`split -b 28M`) and join the halves in /tmp/vp on the device before install.sh.
# The device returns from a call after at most 10 minutes and the campaign outlives it (its own
# session); the todo file resumes it if anything stops it.
set -uo pipefail
what=$1; WORK=$2
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONPATH="$ROOT:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
SHAPE_SET=${SHAPE:-}; SHAPE=${SHAPE:-llama8b_bf16}; TAG=${SHAPE%_bf16}
# A bf16 shape gets its W4A16 twin for the int4 experiment; a shape quantized already
# (kimik2_4layer_int4) has none, and the rules leave int4_weights out for it.
QUANT=""; [ "$TAG" != "$SHAPE" ] && QUANT=${TAG}_w4a16
dir="$WORK/${TAG}_exp"
if [ "$what" = start ]; then
  mkdir -p "$WORK/models" "$dir"
  # the campaign is named after the GPU it ran on (h100, h200; "gpu" where nvidia-smi says nothing)
  GPU_TAG=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | grep -oiE 'h100|h200|a100|l40s|b200' | tr 'A-Z' 'a-z')
  GPU_TAG=${GPU_TAG:-gpu}
  [ -f "$WORK/tok/tokenizer.json" ] || python3 "$ROOT/tasks/model/remote/make_tiny_model.py" "$WORK/tok" >/dev/null
  for shape in "$SHAPE" ${QUANT:+"$QUANT"}; do
    python3 "$ROOT/benchmarks/gpu_model_shapes.py" "$WORK/tok" "$WORK/models/$shape" "$shape" || exit 1
  done
  cat > "$dir/campaign.toml" <<TOML
[campaign]
name = "${GPU_TAG}-${TAG}-experiments${MODE:+-$MODE}"
auto_experiments = $([ "${MODE:-auto}" = auto ] && echo true || echo false)
max_experiments = 3
[host]
kind = "local"
python = "python3"
[service]
model = "$WORK/models/$SHAPE"
tensor_parallel = 1
command = ["python3", "-m", "vllm.entrypoints.cli.main", "serve", "{model}", "--port", "{port}", "-tp", "{tp}",
           "--max-model-len", "2048", "--gpu-memory-utilization", "${GPU_MEM:-0.5}", "--load-format", "dummy",
           "--profiler-config", "{profiler_config}"]
env = { VLLM_USE_FLASHINFER_SAMPLER = "0", HF_HUB_OFFLINE = "1", VLLM_NO_USAGE_STATS = "1" }
ready_deadline_s = 420
[macro]
single_stream_requests = 8
concurrency_max = ${CONC_MAX:-4}
requests_per_level = 16
[gemm]
batch_sizes = [1, 4, 8, 32]
compare_w4a16 = true
repeats = 20
[allreduce]
nccl_variants = false
[profile]
requests = 4
concurrency = ${PROFILE_CONC:-1}
output_tokens = 32
stop_timeout_s = 300
TOML
  if [ "${MODE:-auto}" = fp8 ]; then
    printf '[[experiments]]\noption = "fp8_kv_cache"\n' >> "$dir/campaign.toml"
  elif [ "${MODE:-auto}" = measured ]; then
    [ -z "$QUANT" ] || printf '[[experiments]]\noption = "int4_weights"\nmodel = "%s"\n' "$WORK/models/$QUANT" >> "$dir/campaign.toml"
    printf '[[experiments]]\noption = "fp8_kv_cache"\n' >> "$dir/campaign.toml"
  elif [ "${MODE:-auto}" = spec ] || [ "${MODE:-auto}" = all ]; then
    printf '[[experiments]]\noption = "speculative_decoding_gpu"\n' >> "$dir/campaign.toml"
    if [ "$MODE" = all ]; then  # auto's three, the one never served on a GPU first
      [ -z "$QUANT" ] || printf '[[experiments]]\noption = "int4_weights"\nmodel = "%s"\n' "$WORK/models/$QUANT" >> "$dir/campaign.toml"
      printf '[[experiments]]\noption = "fp8_kv_cache"\n' >> "$dir/campaign.toml"
    fi
  else
    # FP8 KV listed on every shape: on Llama-8B auto leaves it under its bar (-1.9% of TPOT on an H100), and a
    # prediction never checked is the one a user cannot trust
    printf '[[experiments]]\noption = "fp8_kv_cache"\n' >> "$dir/campaign.toml"
    [ -z "$QUANT" ] || printf '[[experiments]]\noption = "int4_weights"\nmodel = "%s"\n' "$WORK/models/$QUANT" >> "$dir/campaign.toml"
  fi
  if [ -n "${LEDGER:-}" ]; then mkdir -p "$dir/reports" && cp "$LEDGER" "$dir/reports/ledger.json"; fi
  # setsid forks (its parent exits at once), so the campaign is found by its command line; the
  # log is appended to: a second start while one runs must not truncate the first one's log.
  (cd "$dir" && setsid nohup python3 -m orchestrate resume >> "$dir/campaign.log" 2>&1 &)
  sleep 2; echo "started: $(pgrep -f "[o]rchestrate resume" | tr '\n' ' ')"; tail -3 "$dir/campaign.log"
  exit 0
fi
OUT=$3; LIMIT=${4:-500}
# a wait without SHAPE: the campaign last started under WORK (its folder's log is the newest)
if [ -z "${SHAPE_SET:-}" ] && [ ! -f "$dir/campaign.log" ]; then
  newest=$(ls -td "$WORK"/*_exp 2>/dev/null | head -1); [ -n "$newest" ] && dir=$newest && echo "waiting on $dir"
fi
end=$(( $(date +%s) + LIMIT ))
running() { pgrep -f "[o]rchestrate resume" >/dev/null; }
while running && [ "$(date +%s)" -lt "$end" ]; do sleep 5; done
if running; then
  # what the campaign has so far comes back too: a lease can end before the next call
  echo "still running"; grep -aE "^\[" "$dir/campaign.log" | tail -15
  tar -czf "$OUT/partial.tar.gz" -C "$dir" state/todo.json campaign.log 2>/dev/null; exit 0
fi
echo "campaign finished"; grep -aE "^\[.*(completed|failed|error|grew)" "$dir/campaign.log" | tail -40
# one pack folder a shape, emptied first: a second shape's campaign on the same machine must not
# send back the first one's traces and probes as its own
pack="$WORK/pack_$TAG"; rm -rf "$pack"; mkdir -p "$pack"
cp "$dir"/reports/*-experiments*/findings.md "$dir/state/todo.json" "$dir/campaign.log" "$dir/reports/ledger.json" "$pack/" 2>/dev/null
for f in "$dir"/state/host/service/*.log; do tail -c 30000 "$f" > "$pack/$(basename "$f").tail"; done
# rank 0's trace of the base and of each variant (3-5 MB each on the Qwen3-MoE shape): the breakdown
# and the idle attribution can be read again here, kernel by kernel
for t in $(find "$dir/state/host/traces" -name "*rank0*.pt.trace.json.gz" -size -12M 2>/dev/null); do
  where=$(dirname "${t#"$dir"/state/host/traces}" | tr -d / ); cp "$t" "$pack/${where:-base}.rank0.trace.json.gz"
done
# the KV micro's kernels (warm, cold) beside the base's and the FP8 variant's traced kernels
[ -f "$pack/fp8_kv_cache.rank0.trace.json.gz" ] && python3 "$ROOT/benchmarks/kv_micro_vs_trace.py" "$dir/state/todo.json" \
  "$pack/base.rank0.trace.json.gz" "$pack/fp8_kv_cache.rank0.trace.json.gz" > "$pack/kv_micro_vs_trace.txt" 2>&1
# vLLM's n-gram drafters timed over this campaign's recorded outputs (the GPU kernel on this GPU)
timeout 120 python3 "$ROOT/benchmarks/ngram_drafter_time.py" "$dir/state/todo.json" "$dir/reports/ledger.json" \
  > "$pack/ngram_drafter_time.txt" 2>&1 || true
# each dense GEMM alone and after an RMSNorm in one CUDA graph, bf16 and W4A16 (Machete): the idle the
# trace shows before each Machete kernel, which the GEMM micro's back-to-back timing does not hold
case "$TAG" in qwen3moe|llama8b)
  timeout 150 python3 "$ROOT/benchmarks/neighbour_gap_probe.py" "$TAG" > "$pack/neighbour_gap_probe.txt" 2>&1 || true ;;
kimik2_4layer_int4)  # the MLA KV micro alone (both backends), beside the traces' kernels it should match
  timeout 300 python3 "$ROOT/benchmarks/kv_mla_micro.py" --out "$pack/kv_mla_micro.json" > "$pack/kv_mla_micro.txt" 2>&1 || true
  python3 "$ROOT/benchmarks/trace_attention_kernels.py" "$pack"/base.rank0.trace.json.gz "$pack"/fp8_kv_cache.rank0.trace.json.gz \
    >> "$pack/kv_mla_micro.txt" 2>&1 || true ;;
esac
tar -czf "$OUT/experiments.tar.gz" -C "$pack" . && ls -la "$OUT"
