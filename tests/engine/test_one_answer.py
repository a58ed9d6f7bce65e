"""One prompt, one answer, on the real default pair: greedy answers loaded on an idle machine and loaded beside
noisy neighbours (a busy loop, and processes copying 200 MB arrays in bursts, as the one-answer issue's reproduction
ran) are the same tokens, chains and trees alike, and the run records name the same kernels. Before, the int4 target
chose its arithmetic by timings taken at load, and one load in four beside such neighbours answered differently."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

pytestmark = pytest.mark.slow

PROMPTS = (  # none of them in the repository's prompt sets
    "Write a Python function that merges overlapping time intervals, and explain it in two sentences.",
    "My sourdough starter smells like nail polish remover. What is going on and what should I do?",
    "Summarize the plot of a heist movie you invent, in five sentences.",
)
_CHURN = ("import time, numpy\nend = time.monotonic() + 600\na = numpy.ones(50_000_000, numpy.float32)\n"
          "while time.monotonic() < end:\n    t = time.monotonic()\n"
          "    while time.monotonic() - t < 0.15: b = a.copy(); del b\n    time.sleep(0.1)\n")


@contextlib.contextmanager
def noisy_neighbours() -> Iterator[None]:
    """A busy loop and two processes copying 200 MB in bursts (150 ms on, 100 ms off)."""
    from playground.bench.neighbours import busy_neighbours

    churn = [subprocess.Popen([sys.executable, "-c", _CHURN]) for _ in range(2)]
    try:
        with busy_neighbours(1):
            time.sleep(1.0)
            yield
    finally:
        for process in churn:
            process.kill()
            process.wait()


def answers() -> tuple[str, list[list[int]]]:
    """A fresh load of the default pair (its int4 target and EAGLE-3.1, as the local backend prepares them), and its
    greedy answers to PROMPTS: plain, a chain of 4 and a tree."""
    from playground.backends.local import LocalBackend
    from playground.engine import GenerationConfig
    from playground.engine.tree_shape import TreeShape
    from playground.presets import get_preset

    backend = LocalBackend(get_preset("smollm2-135m"))
    out = []
    for prompt in PROMPTS:
        ids = backend.encode([{"role": "user", "content": prompt}])
        for drafter, cfg in (("none", GenerationConfig(max_new_tokens=48)),
                             ("eagle3.1", GenerationConfig(max_new_tokens=48, k=4)),
                             ("eagle3.1", GenerationConfig(max_new_tokens=48, k=4,
                                                           tree=TreeShape(depth=4, topk=3, nodes=12)))):
            out.append([t for event in backend.stream(ids, drafter, cfg) for t in event.emitted])
    return backend.target.fast.kernels if backend.target.fast else "", out


def test_the_default_pair_answers_alike_loaded_idle_and_beside_noisy_neighbours(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PLAYGROUND_MODELS_DIR", raising=False)  # the shipped pair, whatever another test has set
    kernels, idle = answers()
    assert kernels.startswith("int4 groups of 32 (Q4_1)"), kernels
    for i in range(0, len(idle), 3):
        assert idle[i] == idle[i + 1] == idle[i + 2]  # chains and trees are the target's own greedy answer
    for _ in range(2):
        with noisy_neighbours():
            busy_kernels, busy = answers()
        assert (busy_kernels, busy) == (kernels, idle)


def test_the_default_answer_on_the_int4_pair_is_plain_decodings(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """What runs with no flags on the shipped int4 pair: the plain probe, the method chosen going on from the probe's
    own cache (Target.keep_prefix: no text forwarded twice) with the drafting guard — the same tokens as plain
    decoding, on prompts not in the repository. Step costs are hand-written (no timing asserted); the guard reads the
    real clock, so which steps draft varies from run to run, never the tokens."""
    from playground.auto_k import PROBE_TOKENS, answer_stream, auto_k
    from playground.backends.local import LocalBackend
    from playground.drafting import PLAIN
    from playground.engine import GenerationConfig
    from playground.presets import get_preset
    from playground.request import resolve_request
    from tests.support.step_costs import use_hand_costs

    monkeypatch.delenv("PLAYGROUND_MODELS_DIR", raising=False)
    monkeypatch.setenv("PLAYGROUND_CACHE_DIR", str(tmp_path))
    use_hand_costs(monkeypatch)
    backend = LocalBackend(get_preset("smollm2-135m"))
    target, taken = backend.target, []
    assert target.fast.row_exact
    take = target.take_prefix
    monkeypatch.setattr(target, "take_prefix", lambda *args: taken.append(take(*args)) or taken[-1])
    for prompt in PROMPTS:
        taken.clear()
        ids = backend.encode([{"role": "user", "content": prompt}])
        cfg = GenerationConfig(max_new_tokens=96, k=1)
        request = resolve_request(backend.preset, "eagle3.1,suffix", cfg, None,
                                  lambda ids=ids: auto_k(backend, "eagle3.1,suffix", ids, len(ids) + 48))
        events = list(answer_stream(backend, ids, request.drafter, request.config, auto=request.auto))
        plain = [t for e in backend.stream(ids, PLAIN, cfg) for t in e.emitted]
        assert [t for e in events for t in e.emitted] == plain, request.auto.short()
        if len(plain) > PROBE_TOKENS:
            assert request.config.guard == (request.drafter != PLAIN)
            assert [len(t.ids) for t in taken if t is not None][:1] == [len(ids) + PROBE_TOKENS - 1]
