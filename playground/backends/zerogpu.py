"""ZeroGPU (Hugging Face Spaces, Gradio SDK): the local engine on a GPU lent per call. A no-op everywhere else.

On ZeroGPU a GPU exists only inside functions decorated with `spaces.GPU`; they run in a forked worker, so their
arguments and yielded values must pickle (StepEvent and GenerationConfig are plain dataclasses), and what they
change in globals is lost. Hence, in app.py: import this module before anything touches CUDA, load the models at
start-up (`shared_backend(preset).preload()`, on "cuda" — ZeroGPU emulates it outside the calls), and stream
through `stream_local`, not the backend directly. vLLM does not run on ZeroGPU (vLLM #3510). Not verified on a
ZeroGPU Space.
"""

from __future__ import annotations

from typing import Callable, Iterator, TypeVar

from playground.engine import GenerationConfig, StepEvent
from playground.presets import get_preset

from .availability import on_zerogpu

if on_zerogpu():
    import spaces  # must be imported before CUDA is initialised
else:
    spaces = None

F = TypeVar("F", bound=Callable)
MAX_GPU_SECONDS = 120  # the longest GPU lease one request asks for (shorter leases queue sooner)


def gpu(fn: F | None = None, *, duration: int | Callable[..., int] | None = None):
    """`spaces.GPU` on a ZeroGPU Space, else the function unchanged. Use bare or with `duration=` (seconds, or a
    function of the call's arguments)."""

    def wrap(f: F) -> F:
        if spaces is None:
            return f
        return spaces.GPU(f, duration=duration) if duration is not None else spaces.GPU(f)

    return wrap(fn) if fn is not None else wrap


def lease_seconds(preset_name: str, prompt_ids: list[int], drafter: str, cfg: GenerationConfig) -> int:
    """A GPU lease long enough for one request: start-up plus a generous per-token allowance, capped."""
    return int(min(MAX_GPU_SECONDS, 20 + cfg.max_new_tokens * 0.1 + len(prompt_ids) * 0.002))


@gpu(duration=lease_seconds)
def stream_local(preset_name: str, prompt_ids: list[int], drafter: str, cfg: GenerationConfig) -> Iterator[StepEvent]:
    """The local engine's step events for one request, on the lent GPU when on ZeroGPU."""
    from . import shared_backend

    yield from shared_backend(get_preset(preset_name)).stream(prompt_ids, drafter, cfg)
