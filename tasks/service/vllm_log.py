"""Read vLLM's start-up log into load progress, and spot fatal errors early.

Formats (vLLM 0.32, CPU and GPU; ../shared/FACTS.md):
  Loading safetensors checkpoint shards:  45% Completed | 29/64 [02:10<02:41, 0.22it/s]
  Loading weights took 0.05 seconds
  Model loading took 3.88 GiB memory and 20.44 seconds   (vLLM 0.26: "took 14.96 GiB and 1.54 seconds")
  Capturing CUDA graphs (decode, FULL): 45%|...| 23/51
  Graph capturing finished in 12 secs, took 0.5 GiB
  init engine (profile, create kv cache, warmup model) took 46.46 s
  Application startup complete.
and what the server chose: `quantization=...`, `enforce_eager=...`, `cudagraph_mode`, `Using
FLASH_ATTN attention backend`, `Using MacheteLinearKernel for CompressedTensorsWNA16`,
`Using CompressedTensorsWNA16MarlinMoEMethod`, `Using 'MARLIN' WNA16 MoE backend`.
"""

from __future__ import annotations

import re

from pydantic import PrivateAttr

from tasks.service.results import LoadSummary

SHARDS = re.compile(r"Loading safetensors checkpoint shards:\s*(\d+)% Completed \| (\d+)/(\d+) \[([^<\]]*)<([^,\]]*)")
WEIGHTS = re.compile(r"Loading weights took ([\d.]+) seconds")
MODEL_LOAD = re.compile(r"Model loading took ([\d.]+) GiB(?: memory)? and ([\d.]+) seconds")
GRAPHS = re.compile(r"Capturing CUDA graphs[^:]*:\s*(\d+)%")
GRAPHS_DONE = re.compile(r"Graph capturing finished in ([\d.]+) secs")
ENGINE_INIT = re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s")
QUANTIZATION = re.compile(r"\bquantization=([\w-]+)")
ENFORCE_EAGER = re.compile(r"\benforce_eager=(True|False)")
CUDAGRAPH_MODE = re.compile(r"cudagraph_mode'?\s*[:=]\s*<?CUDAGraphMode\.(\w+)")
ATTENTION_BACKEND = re.compile(r"Using (\w+) attention backend")
LINEAR_KERNEL = re.compile(r"Using (\w+Kernel) for (\w+)")
MOE_METHOD = re.compile(r"Using (\w+MoEMethod)")
MOE_BACKEND = re.compile(r"Using '(\w+)' [\w ]*MoE backend")
KV_CACHE = re.compile(r"(?:GPU|CPU) KV cache size: ([\d,]+) tokens")
FATAL = [
    re.compile(r"Engine core initialization failed"),
    re.compile(r"EngineCore failed to start"),
    re.compile(r"torch\.OutOfMemoryError|CUDA out of memory"),
    re.compile(r"^(?:\(\w+ pid=\d+\) )?(?:OSError|ValueError|FileNotFoundError|RuntimeError): ", re.M),
    re.compile(r"error: (?:unrecognized arguments|argument)"),
    re.compile(r"Address already in use"),
]

# An exception vLLM logged at ERROR level (a worker's traceback, each line behind the logger's prefix):
# its last line names the cause that "EngineCore failed to start" only reports.
LOGGED_EXCEPTION = re.compile(r"\bERROR\b[^\]]*\]\s+((?:[A-Za-z_][\w.]*)?(?:Error|Exception)\w*: .+)$")
WRAPPERS = ("Exception: WorkerProc initialization failed", "RuntimeError: Engine core initialization failed")
"""The exceptions that only wrap a cause logged before them."""


def _seconds(clock: str) -> float | None:
    parts = clock.strip().split(":")
    if not all(part.isdigit() for part in parts) or not parts:
        return None
    total = 0.0
    for part in parts:
        total = total * 60 + int(part)
    return total


class LoadProgress(LoadSummary):
    """The start-up log read so far: the stored summary's fields (declared once, in
    tasks/service/results.py), filled line by line."""

    phase: str = "starting"
    _partial: str = PrivateAttr("")

    def feed(self, text: str) -> None:
        """Consume new log text (any chunking); tqdm's carriage returns count as line ends."""
        text = (self._partial + text).replace("\r", "\n")
        lines = text.split("\n")
        self._partial = lines.pop()
        for line in lines:
            self._line(line)

    def _line(self, line: str) -> None:
        self.lines_seen += 1
        self._parse(line)
        if not self.phases_seen or self.phases_seen[-1] != self.phase:
            self.phases_seen.append(self.phase)

    def _parse(self, line: str) -> None:
        if "Starting to load model" in line:
            self.phase = "loading weights"
        if match := SHARDS.search(line):
            self.phase = "loading weights"
            self.shard_percent = int(match[1])
            self.shards_done, self.shards_total = int(match[2]), int(match[3])
            self.eta_s = _seconds(match[5])
        if match := WEIGHTS.search(line):
            self.weights_load_s = float(match[1])
            self.phase = "initialising engine"
        if match := MODEL_LOAD.search(line):
            self.model_memory_gib, self.model_load_s = float(match[1]), float(match[2])
            self.phase = "initialising engine"
        if match := KV_CACHE.search(line):
            self.kv_cache_tokens = int(match[1].replace(",", ""))
        if match := GRAPHS.search(line):
            self.phase = "capturing CUDA graphs"
            self.graph_capture_percent = int(match[1])
        if match := GRAPHS_DONE.search(line):
            self.graph_capture_s = float(match[1])
        if match := ENGINE_INIT.search(line):
            self.engine_init_s = float(match[1])
            self.phase = "starting API server"
        self._server_choices(line)
        if "Application startup complete" in line:
            self.startup_complete = True
            self.phase = "ready"
        if self.fatal_line is None and any(pattern.search(line) for pattern in FATAL):
            self.fatal_line = line.strip()
        if self.logged_exception is None and (match := LOGGED_EXCEPTION.search(line.strip())):
            if not match[1].startswith(WRAPPERS):
                self.logged_exception = match[1]

    def failure(self) -> str:
        """The fatal line, and the cause a worker logged before it where the line does not say it."""
        fatal = self.fatal_line or "?"
        cause = self.logged_exception
        return fatal if not cause or cause in fatal else f"{fatal} (cause: {cause})"

    def _server_choices(self, line: str) -> None:
        """What vLLM chose: quantization, graphs, attention backend, GEMM and MoE kernels."""
        if self.quantization is None and (match := QUANTIZATION.search(line)):
            self.quantization = match[1]
        if self.enforce_eager is None and (match := ENFORCE_EAGER.search(line)):
            self.enforce_eager = match[1] == "True"
        if self.cudagraph_mode is None and (match := CUDAGRAPH_MODE.search(line)):
            self.cudagraph_mode = match[1]
        if match := ATTENTION_BACKEND.search(line):
            self.attention_backend = match[1]
        if (match := LINEAR_KERNEL.search(line)) and f"{match[1]} for {match[2]}" not in self.linear_kernels:
            self.linear_kernels.append(f"{match[1]} for {match[2]}")
        if match := MOE_METHOD.search(line):
            self.moe_method = match[1]
        if match := MOE_BACKEND.search(line):
            self.moe_method = f"{self.moe_method or 'MoE'} ({match[1]} backend)"

    def summary(self) -> dict[str, object]:
        return {key: value for key, value in self.model_dump().items() if value is not None and value != []}

    def describe(self) -> str:
        parts = [self.phase]
        if self.shard_percent is not None and self.phase == "loading weights":
            parts.append(f"shards {self.shards_done}/{self.shards_total} ({self.shard_percent}%)")
        if self.graph_capture_percent is not None and self.phase == "capturing CUDA graphs":
            parts.append(f"{self.graph_capture_percent}%")
        if self.eta_s is not None and self.phase == "loading weights":
            parts.append(f"ETA {self.eta_s:.0f} s")
        return ", ".join(parts)
