"""What a step costs on this machine, for one target and drafter, measured once and kept: a plain step, verifying N
rows in one target forward, and drafting a chain of k or a tree. With a replay (engine/replay.py) it predicts a
configuration's speedup without running it: the answer's tokens at the plain step's cost, over the sum of each
replayed step's drafting and verification.

The measurement runs the engine's own calls as its loops run them (threads set per phase by the target, drafting on
one thread), at one context length, in rounds that time every item once, so a neighbour that comes and goes touches
them all alike. Each cost keeps its median and its 10th-90th percentile range; the prediction's range combines the
extremes. What it leaves out: the context growing during an answer (costs are taken at `context` tokens) and the
Python work between calls.
"""

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
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from .config import GenerationConfig
from .decode import ChainDrafter
from .loop import Pending
from .threads import other_runnable_tasks
from .trace import StepEvent
from .tree import draft_tree
from .tree_shape import TreeShape

VERIFY_ROWS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 13, 17, 25, 33)  # measured; others interpolated
CHAIN_KS = tuple(range(1, 9))
PENDING_ROWS = 3  # target features a typical step's first drafter call reads (accepted drafts + 1)
# What `measure` times and how: a profile measured by another version is measured again. Version 2: the load of each
# timed call read consistently (threads.other_runnable_tasks), the profile filed under the load it measured.
CODE_VERSION = 2
BUSY_SHARE = 0.5  # a profile whose timed calls began beside another runnable task this often was measured busy


@dataclass(frozen=True)
class Cost:
    ms: float  # median
    low: float  # 10th percentile
    high: float  # 90th percentile

    @classmethod
    def of(cls, samples: list[float]) -> Cost:
        ordered = sorted(samples)
        at = lambda q: ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]  # noqa: E731
        return cls(statistics.median(ordered), at(0.1), at(0.9))


@dataclass
class CostProfile:
    machine: dict
    target: str
    drafter: str
    context: int
    plain: Cost
    verify: dict[int, Cost]  # rows -> one target forward over them
    chain: dict[int, Cost]  # k -> drafting a chain of k
    tree: dict[str, Cost] = field(default_factory=dict)  # TreeShape as "depth/topk/nodes" -> drafting it
    busy_share: float | None = None  # share of the timed calls that began beside another runnable task
    kernels: str | None = None  # the target's products as chosen at load (target_kernels)
    code: int | None = None  # CODE_VERSION of the measurement

    @property
    def measured_busy(self) -> bool | None:
        """Whether this profile was measured on a busy machine, by its own timed calls (`BUSY_SHARE`); None where
        the load was not read (a GPU's host, a system that does not say)."""
        return None if self.busy_share is None else self.busy_share >= BUSY_SHARE

    def verify_cost(self, rows: int) -> Cost:
        """Measured, or linear between the nearest measured row counts (beyond the last: its slope)."""
        if rows in self.verify:
            return self.verify[rows]
        known = sorted(self.verify)
        below = max((r for r in known if r < rows), default=known[0])
        above = min((r for r in known if r > rows), default=None)
        if above is None:
            below, above = known[-2], known[-1]
        t = (rows - below) / (above - below)
        a, b = self.verify[below], self.verify[above]
        return Cost(*(x + t * (y - x) for x, y in ((a.ms, b.ms), (a.low, b.low), (a.high, b.high))))

    def drafting_cost(self, event: StepEvent, tree: TreeShape | None) -> Cost:
        if not event.drafted and not event.tree_tokens:
            return Cost(0.0, 0.0, 0.0)
        if tree is not None and event.tree_tokens is not None:
            return self.tree[tree_key(tree)]  # measured with the profile: its trees are part of its cache key
        return self.chain[min(len(event.drafted), max(self.chain))]

    def predict(self, events: list[StepEvent], tree: TreeShape | None = None,
                plain_tokens: int = 0) -> tuple[float, float, float]:
        """(speedup, low, high) of the replayed steps `events`, and `plain_tokens` more decoded plainly (k auto's
        answers where it chose plain decoding), over plain decoding of the same tokens, the prefill left out of both
        (as the live speedup leaves it out)."""
        steps = [e for e in events if e.step > 0]
        tokens = sum(len(e.emitted) for e in steps) + plain_tokens
        if not tokens:
            return 1.0, 1.0, 1.0
        spent = [(self.drafting_cost(e, tree), self.verify_cost(len(e.tree_tokens) + 1 if e.tree_tokens is not None
                                                                  else len(e.drafted) + 1)) for e in steps]
        total = [sum(getattr(d, part) + getattr(v, part) for d, v in spent) + plain_tokens * getattr(self.plain, part)
                 for part in ("ms", "low", "high")]
        return (tokens * self.plain.ms / total[0], tokens * self.plain.low / total[2],
                tokens * self.plain.high / total[1])

    def expected_speedup(self, tokens_per_step: float, k: int) -> tuple[float, float, float]:
        """(speedup, low, high) of chains of k that emit `tokens_per_step` on average, over plain decoding: a step's
        tokens at the plain step's cost over drafting k and verifying k + 1 rows."""
        step = (self.chain[k], self.verify_cost(k + 1))
        return (tokens_per_step * self.plain.ms / sum(c.ms for c in step),
                tokens_per_step * self.plain.low / sum(c.high for c in step),
                tokens_per_step * self.plain.high / sum(c.low for c in step))

    def to_dict(self) -> dict:
        data = asdict(self)
        data["verify"] = {str(k): v for k, v in data["verify"].items()}
        data["chain"] = {str(k): v for k, v in data["chain"].items()}
        return data

    @classmethod
    def from_dict(cls, data: dict) -> CostProfile:
        costs = lambda d: {key: Cost(**value) for key, value in d.items()}  # noqa: E731
        return cls(data["machine"], data["target"], data["drafter"], data["context"], Cost(**data["plain"]),
                   {int(k): v for k, v in costs(data["verify"]).items()},
                   {int(k): v for k, v in costs(data["chain"]).items()}, costs(data.get("tree", {})),
                   data.get("busy_share"), data.get("kernels"), data.get("code"))


def tree_key(tree: TreeShape) -> str:
    return f"{tree.depth}/{tree.topk}/{tree.nodes}"


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
    samples: dict[tuple, list[float]] = {key: [] for key in items}
    for run in items.values():  # warm-up: first calls pay for allocation and kernel choice
        run()
    beside = []  # other runnable tasks as each timed call began
    for _ in range(rounds):
        for key, run in items.items():
            beside.append(load())
            start = target.clock()
            run()
            samples[key].append((target.clock() - start) * 1000)
    cost = {key: Cost.of(values) for key, values in samples.items()}
    known = [n for n in beside if n is not None]
    return CostProfile(this_machine(str(target.device)), names[0], names[1], context, cost[("plain", 0)],
                       {r: cost[("verify", r)] for r in VERIFY_ROWS}, {k: cost[("chain", k)] for k in CHAIN_KS},
                       {tree_key(t): cost[("tree", tree_key(t))] for t in trees},
                       sum(n > 0 for n in known) / len(known) if known else None, target_kernels(target),
                       CODE_VERSION)


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


def shipped_acceptance(folder: Path, drafter: str) -> list[float]:
    """The drafter's acceptance by position from `folder`/evaluation.json (`train evaluate`: its rows by k; the
    largest k's), or ValueError saying there is none."""
    source = folder / "evaluation.json"
    try:
        rows = json.loads(source.read_text())["acceptance"][drafter]
        return rows[str(max(int(k) for k in rows))]["per_position_acceptance"]
    except (OSError, ValueError, KeyError, TypeError):
        raise ValueError(f"none in {source} (written by `train evaluate`)") from None


def kept_profile(path: Path) -> CostProfile | None:
    """The profile kept at `path`, or None where there is none or it cannot be read (an older or broken file)."""
    try:
        return CostProfile.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def keep_profile(path: Path, profile: CostProfile) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(profile.to_dict(), indent=1))
    tmp.replace(path)


def expected_tokens(per_position: list[float], k: int) -> float:
    """Tokens a chain of k emits per step on average: the target's own, plus each position's acceptance (the share
    of drafting steps whose draft there was accepted, vLLM's per-position rate, which already counts a rejection
    before it)."""
    return 1 + sum(per_position[:k])


@dataclass(frozen=True)
class AutoK:
    """What `--k auto` chose and why."""

    k: int | None  # None: plain decoding
    predicted: dict[int, float]  # k -> predicted speedup over plain decoding
    why: str
    acceptance: tuple[float, ...] = ()  # the acceptance by position the prediction read

    def to_dict(self) -> dict:
        return {"k": self.k, "predicted_speedup": {str(k): round(v, 3) for k, v in self.predicted.items()},
                "why": self.why, "acceptance_by_position": [round(a, 3) for a in self.acceptance]}

    def short(self) -> str:
        """One clause for a status line."""
        if self.k is None:
            return "k auto chose plain decoding: no k is predicted to pay on this machine"
        return f"k auto chose k={self.k}, predicted {self.predicted[self.k]:.2f}× on this machine"


def choose_k(profile: CostProfile, per_position: list[float], source: str, most: int = 8,
             margin: float = 1.05) -> AutoK:
    """The k predicted fastest from the drafter's acceptance by position and this machine's step costs; plain
    decoding where none is predicted to beat it by `margin` (a speedup inside the prediction's error is not one)."""
    predicted = {k: profile.expected_speedup(expected_tokens(per_position, k), k)[0]
                 for k in range(1, min(most, len(per_position), max(profile.chain)) + 1)}
    if not predicted:
        return AutoK(None, {}, f"no acceptance by position in {source}: plain decoding")
    best = max(predicted, key=predicted.__getitem__)
    table = ", ".join(f"k={k} {v:.2f}x" for k, v in predicted.items())
    rates = tuple(per_position)
    if predicted[best] < margin:
        return AutoK(None, predicted, f"no k is predicted to beat plain decoding by {margin - 1:.0%} on this machine "
                                      f"({table}; acceptance from {source}): plain decoding", rates)
    return AutoK(best, predicted, f"k={best} is predicted fastest on this machine ({table}; acceptance from {source})",
                 rates)
