"""Step costs measured and kept (engine/costs.py holds what a profile is and predicts): the engine's own calls timed
as its loops run them (`measure`), the machine and load a profile belongs to, and the profile kept per machine, pair,
context and load (`pair_profile`), measured again where none fits."""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from .config import GenerationConfig
from .costs import (
    CHAIN_KS,
    CODE_VERSION,
    LOOP_PROMPT,
    LOOP_STEPS,
    PENDING_ROWS,
    VERIFY_ROWS,
    Cost,
    CostProfile,
    tree_key,
)
from .decode import ChainDrafter, plain_generate, speculative_generate
from .loop import Pending
from .threads import other_runnable_tasks
from .tree import draft_tree
from .tree_shape import TreeShape


def target_kernels(target) -> str:
    """The target's products as chosen at load: the fast path's kernels string (FastLlama.kernels), or how the
    target runs otherwise (transformers and its dtype). Whether float32 weights are packed yet ("mkl-packed" or
    "plain") is not a choice made at load but a state that `measure` itself changes (it packs for its rows), so
    both read as one."""
    fast = getattr(target, "fast", None)
    if fast is not None:
        return re.sub(r"^(mkl-packed|plain)\b", "float32 products", str(fast.kernels))
    return f"{getattr(target, 'path', 'transformers')} {getattr(target, 'dtype', '')}".strip()


@torch.inference_mode()
def measure(target, drafter, aux_layers: list[int], context_ids: list[int], names: tuple[str, str],
            trees: tuple[TreeShape, ...] = (), rounds: int = 7,
            load: Callable[[], int | None] = other_runnable_tasks) -> CostProfile:
    """Time each cost `rounds` times, in rounds that take every item once, at the context `context_ids`; `load()`,
    read as each timed call begins, gives the profile its busy_share."""
    context = len(context_ids) - 1
    cache = target.new_cache()
    target.expect_rows(max(VERIFY_ROWS))
    prefix = target.forward(context_ids[:-1], cache, aux_layers)
    aux = prefix.aux
    chains = ChainDrafter(drafter, GenerationConfig(k=max(CHAIN_KS), instrument=False), target, None)
    chains.draft(context_ids, Pending(aux, 0), 1)  # the drafter's cache holds the context
    pending = Pending(aux[context - PENDING_ROWS : context], context - PENDING_ROWS)
    rows_ids = torch.tensor(context_ids[-1:] * max(VERIFY_ROWS), device=target.device)

    def plain() -> None:
        target.forward(context_ids[-1:], cache, last_only=True)
        cache.rollback(context)

    def verify(rows: int):
        def run() -> None:
            target.forward(rows_ids[:rows], cache, aux_layers)
            cache.rollback(context)
        return run

    def chain(k: int):
        def run() -> None:
            target.use_threads(1)
            chains.draft(context_ids, pending, k)
        return run

    def drafted_tree(shape: TreeShape):
        def run() -> None:
            target.use_threads(1)
            draft_tree(drafter, chains.cache, context_ids, pending, shape, chains.vocab_map)
        return run

    items = {("plain", 0): plain, **{("verify", r): verify(r) for r in VERIFY_ROWS},
             **{("chain", k): chain(k) for k in CHAIN_KS}, **{("tree", tree_key(t)): drafted_tree(t) for t in trees}}
    samples: dict[tuple, list[float]] = {key: [] for key in items} | {("loop", 0): [], ("loop", 1): []}
    for run in items.values():  # warm-up: first calls pay for allocation and kernel choice
        run()
    short = list(context_ids[-LOOP_PROMPT:])

    def loop_work(speculative: bool) -> float:
        """The loop's own work a step (ms): each step's time less its drafting and verification, over a short real
        run of the loop (plain, or chains of 4), the median of its steps."""
        cfg = GenerationConfig(max_new_tokens=LOOP_STEPS + 1, k=4, instrument=False)
        events = list(speculative_generate(target, drafter, aux_layers, short, cfg) if speculative
                      else plain_generate(target, short, cfg))
        work = [(b.elapsed_ms - a.elapsed_ms) - (b.draft_ms or 0.0) - b.verify_ms for a, b in zip(events[1:],
                                                                                                 events[2:])]
        return statistics.median(work) if work else 0.0

    loop_work(False), loop_work(True)  # warm-up
    # Each call is timed after what precedes it in a real loop, so the caches hold what they hold there: a plain step
    # after a plain step (part of the weights still cached), a verification and a tree after a drafter call (whose
    # weights evicted the target's), a drafter call after a verification. Timed back to back instead, verifications
    # of 5 rows read 4.5 ms where the loop's took 5.7, and plain steps 3.9 where the loop's took 3.4 (Zen 4), and
    # k auto predicted k = 4 some 25 % faster than it ran.
    before = {key: plain if key[0] == "plain" else chain(1) if key[0] in ("verify", "tree") else verify(2)
              for key in items}
    beside = []  # other runnable tasks as each timed call began
    read_own_gauge = getattr(target.threads, "sample", None)
    for _ in range(rounds):
        for key, run in items.items():
            beside.append(load())
            before[key]()
            if read_own_gauge is not None:
                # The target reads the load before a forward at most every 50 ms (threads.LoadGauge), waiting for our
                # threads to settle; taken inside a timed call, that wait fell on whichever forward came first after
                # the interval — most often the plain step, which follows the drafting block of each round — and a
                # tiny pair's plain step read up to a third dearer than it is. Read now, none falls inside.
                read_own_gauge()
            start = target.clock()
            run()
            samples[key].append((target.clock() - start) * 1000)
        samples[("loop", 0)].append(loop_work(False))
        samples[("loop", 1)].append(loop_work(True))
    cost = {key: Cost.of(values) for key, values in samples.items()}
    known = [n for n in beside if n is not None]
    return CostProfile(this_machine(str(target.device)), names[0], names[1], context, cost[("plain", 0)],
                       {r: cost[("verify", r)] for r in VERIFY_ROWS}, {k: cost[("chain", k)] for k in CHAIN_KS},
                       {tree_key(t): cost[("tree", tree_key(t))] for t in trees},
                       {0: cost[("loop", 0)], 1: cost[("loop", 1)]},
                       sum(n > 0 for n in known) / len(known) if known else None, target_kernels(target),
                       CODE_VERSION, time.time())


def this_machine(device: str) -> dict:
    """What the costs were measured on: the CPU's name, its cores, torch, the device."""
    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), cpu)
    except OSError:
        pass
    gpu = torch.cuda.get_device_name() if device.startswith("cuda") and torch.cuda.is_available() else None
    return {"cpu": cpu, "cores": os.cpu_count(), "torch": torch.__version__, "device": device, "gpu": gpu}


def machine_busy(read: Callable[[], int | None] = other_runnable_tasks, samples: int = 10,
                 interval_s: float = 0.02) -> bool | None:
    """Whether another task takes a core now: runnable beside this process in at least half of `samples` reads
    `interval_s` apart; None on a GPU's host or where the system does not say."""
    reads = []
    for i in range(samples):
        if i:
            time.sleep(interval_s)
        reads.append(read())
    known = [n for n in reads if n is not None]
    return sum(n > 0 for n in known) >= len(known) / 2 if known else None


def profile_path(root: Path, names: tuple[str, str], trees: tuple[TreeShape, ...], context: int,
                 device: str = "cpu", busy: bool | None = None, kernels: str = "") -> Path:
    """Where a profile of this machine, pair, context, trees, load (idle, or beside another task), target kernels and
    measuring code is kept."""
    machine = this_machine(device)
    key = json.dumps([machine, *names, context, [tree_key(t) for t in trees], kernels, CODE_VERSION]
                     + (["busy"] if busy else []))
    return root / "cost-profiles" / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def context_bucket(tokens: int, max_positions: int) -> int:
    """The context length a profile is measured at: `tokens` rounded to a power of two (64 at least), so answers of
    similar length share one measurement."""
    return min(max(64, 2 ** round(math.log2(max(tokens, 1)))), max_positions - 40)


def pair_profile(target, drafter, aux_layers: list[int], names: tuple[str, str], seed_ids: list[int], tokens: int,
                 root: Path, trees: tuple[TreeShape, ...] = (), fresh: bool = False,
                 announce: Callable[[str], None] | None = None,
                 busy: Callable[[], bool | None] = machine_busy,
                 load: Callable[[], int | None] = other_runnable_tasks) -> CostProfile:
    """This machine's step costs for the pair `names` at the context bucket of `tokens`, measured over `seed_ids`
    repeated to that length and kept under `root` (`fresh`: measured again); `announce` says so before measuring.

    Kept apart for an idle machine and one with another task runnable beside us (`busy()`, read now): costs measured
    idle mislead under load (a longer k than the load pays for) and the reverse, so each load gets its own. A
    measurement is filed under the load its own timed calls met (`CostProfile.measured_busy`, `load()` read as each
    began), not the reading before it, and a kept profile is used only where its own load is the one read now and it
    was measured by this code (`CODE_VERSION`) over the kernels the target chose at load; otherwise it is measured
    again. A measurement whose calls met another load than the reading before it is returned for this run (it is what
    the machine costs now) and filed where it belongs."""
    context = context_bucket(tokens, target.max_positions)
    ids = (seed_ids * (context // len(seed_ids) + 1))[: context + 1]
    on_cpu = str(target.device) == "cpu"
    device, kernels = str(target.device), target_kernels(target)
    now = busy() if on_cpu else None
    path = profile_path(root, names, trees, context, device, now, kernels)
    kept = kept_profile(path)
    usable = kept is not None and kept.kernels == kernels and kept.code == CODE_VERSION and (
        now is None or kept.measured_busy is None or kept.measured_busy == now)
    if usable and not fresh:
        return kept
    if announce is not None:
        announce("measuring this machine's step costs (once per machine, pair, context and load)…")
    profile = measure(target, drafter, aux_layers, ids, names, trees, load=load)
    measured = profile.measured_busy if on_cpu and profile.measured_busy is not None else now
    keep_profile(profile_path(root, names, trees, context, device, measured, kernels), profile)
    if kept is not None and not usable and measured != now:
        path.unlink(missing_ok=True)  # another load's, an older code's or other kernels' profile: replaced above
    return profile


_read: dict[Path, tuple[int, CostProfile]] = {}  # path -> (its file's mtime, the profile read from it)


def kept_profile(path: Path) -> CostProfile | None:
    """The profile kept at `path`, or None where there is none or it cannot be read (an older or broken file); read
    once while the file is unchanged (a choice before each answer reads it, and its resampled ranges, again)."""
    try:
        stamp = path.stat().st_mtime_ns
        if path not in _read or _read[path][0] != stamp:
            _read[path] = (stamp, CostProfile.from_dict(json.loads(path.read_text())))
        return _read[path][1]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def keep_profile(path: Path, profile: CostProfile) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(profile.to_dict(), indent=1))
    tmp.replace(path)
