"""ZeroGPU (Hugging Face Spaces, Gradio SDK): the local engine on a GPU lent per call. A no-op everywhere else.

On ZeroGPU a GPU exists only inside functions decorated with `spaces.GPU`; they run in a forked worker, so their
arguments and yielded values must pickle (StepEvent and GenerationConfig are plain dataclasses), and what they
change in globals is lost. Hence, in app.py: import this module before anything touches CUDA, load the models at
start-up (`shared_backend(preset).preload()`, on "cuda" — ZeroGPU emulates it outside the calls), and stream
through `stream_local`, not the local backend directly: `open_backend` wraps the local backend in `ZeroGpuBackend`,
whose stream does so, and whose capabilities say what a GPU call cannot do (see the stop switch, time plain steps).
vLLM does not run on ZeroGPU (vLLM #3510). Not verified on a ZeroGPU Space.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

from playground.engine import GenerationConfig, StepEvent
from playground.presets import get_preset
from playground.request.availability import on_zerogpu

if TYPE_CHECKING:
    from .local import LocalBackend

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

    backend = shared_backend(get_preset(preset_name))
    local = backend.inner if isinstance(backend, ZeroGpuBackend) else backend  # in the worker: the wrapped one
    yield from local.stream(prompt_ids, drafter, cfg)


class ZeroGpuBackend:
    """The local backend on ZeroGPU: the same models, encoding and decoding, with each request streamed inside a GPU
    call (`stream_local`). That call runs in a forked worker, which cannot see the stop switch (the consumer stops
    pulling instead) and holds the GPU only while it runs, so plain steps are not timed beside a run."""

    name = "local"

    def __init__(self, inner: LocalBackend) -> None:
        self.inner, self.preset = inner, inner.preset
        self.missing_fields = {**inner.missing_fields, "baseline": (
            "on ZeroGPU the GPU exists only inside each request's GPU call, so plain decoding is not timed beside "
            "the run")}
        self.capabilities = replace(inner.capabilities, times_plain_steps=False, checks_stop=False)

    @property
    def exact_speculation(self) -> bool:
        return self.inner.exact_speculation

    def preload(self) -> None:
        self.inner.preload()

    def encode(self, messages: list[dict], chat_template: str | None = None, raw: bool = False) -> list[int]:
        return self.inner.encode(messages, chat_template, raw)

    def decode(self, ids: list[int]) -> str:
        return self.inner.decode(ids)

    def stream(self, prompt_ids: list[int], drafter: str, cfg: GenerationConfig,
               should_stop: Callable[[], bool] | None = None, session: str | None = None) -> Iterator[StepEvent]:
        # the forked GPU worker keeps nothing between calls: a method's session state sees its own run only
        return stream_local(self.preset.name, prompt_ids, drafter, cfg)

    def plain_probe(self):
        raise ValueError(self.missing_fields["baseline"])

    def held(self) -> str | None:
        return None  # its weights live in the app's process

    def starting(self, drafter: str, k: int) -> str | None:
        return None

    def preparing(self, drafter: str, k: int) -> Iterator[str]:
        return iter(())
