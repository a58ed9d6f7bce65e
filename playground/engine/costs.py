"""What a step costs on this machine, for one target and drafter, measured once and kept: a plain step, verifying N
rows in one target forward, and drafting a chain of k or a tree. With a replay (engine/replay.py) it predicts a
configuration's speedup without running it: the answer's tokens at the plain step's cost, over the sum of each
replayed step's drafting and verification.

The measurement runs the engine's own calls as its loops run them (threads set per phase by the target, drafting on
one thread), at one context length, in rounds that time every item once, so a neighbour that comes and goes touches
them all alike. Each cost keeps its median, its 10th-90th percentile and its samples by round. A prediction divides
by the medians; its range is how far that moves when the medians are taken again over the rounds resampled (the
same rounds for every cost, so a neighbour that slowed one round slows all its costs together): the 10th-90th
percentile of RESAMPLES such predictions. It says how well the step costs were measured, not how a live run will
vary. What it leaves out: the context growing during an answer (costs are taken at `context` tokens), a weightless
method's lookup, and a load other than the one the costs met (a profile is kept per load: `pair_profile`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import random
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from playground.drafting import method_of

from .config import GenerationConfig
from .decode import ChainDrafter, plain_generate, speculative_generate
from .loop import Pending
from .threads import other_runnable_tasks
from .trace import StepEvent
from .tree import draft_tree
from .tree_shape import TreeShape

VERIFY_ROWS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 13, 17, 25, 33)  # measured; others interpolated
CHAIN_KS = tuple(range(1, 9))
PENDING_ROWS = 3  # target features a typical step's first drafter call reads (accepted drafts + 1)
# What `measure` times and how: a profile measured by another version is measured again. Version 2: the load of each
# timed call read consistently (threads.other_runnable_tasks), the profile filed under the load it measured. Version
# 3: the samples kept by round (the prediction's range) and the time of the measurement. Version 4: the target's own
# load reading taken before each timed call, never inside it. Version 5: the loops' own work around the calls (the
# choice, acceptance, rollback, the step's event) measured per step in the real loops, plain and speculative.
CODE_VERSION = 5
LOOP_STEPS = 6  # steps of each real loop timed per round for the loop's own work
LOOP_PROMPT = 32  # tokens of the context those short runs read (the work around the calls hardly depends on it)
BUSY_SHARE = 0.5  # a profile whose timed calls began beside another runnable task this often was measured busy
RESAMPLES = 200  # predictions over the rounds resampled, for a prediction's range
RANGE_QUANTILES = (0.1, 0.9)


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@dataclass(frozen=True)
class Cost:
    ms: float  # median
    low: float  # 10th percentile
    high: float  # 90th percentile
    rounds: tuple[float, ...] = ()  # the samples, by round (empty in a profile made by hand)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rounds", tuple(self.rounds))  # read back from JSON as a list

    @classmethod
    def of(cls, samples: list[float]) -> Cost:
        """The cost of `samples`, given in round order."""
        return cls(statistics.median(samples), quantile(samples, RANGE_QUANTILES[0]),
                   quantile(samples, RANGE_QUANTILES[1]), tuple(samples))


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
    loop: dict[int, Cost] = field(default_factory=dict)  # the loop's own work a step: 0 plain, 1 speculative
    busy_share: float | None = None  # share of the timed calls that began beside another runnable task
    kernels: str | None = None  # the target's products as chosen at load (target_kernels)
    code: int | None = None  # CODE_VERSION of the measurement
    measured_at: float | None = None  # when (time.time())

    @property
    def measured_busy(self) -> bool | None:
        """Whether this profile was measured on a busy machine, by its own timed calls (`BUSY_SHARE`); None where
        the load was not read (a GPU's host, a system that does not say)."""
        return None if self.busy_share is None else self.busy_share >= BUSY_SHARE

    def _verify_weights(self, rows: int) -> dict[tuple, float]:
        """Verifying `rows` as measured row counts: the count itself, or linear between the nearest measured ones
        (beyond the last: its slope)."""
        if rows in self.verify:
            return {("verify", rows): 1.0}
        known = sorted(self.verify)
        below = max((r for r in known if r < rows), default=known[0])
        above = min((r for r in known if r > rows), default=None)
        if above is None:
            below, above = known[-2], known[-1]
        t = (rows - below) / (above - below)
        return {("verify", below): 1 - t, ("verify", above): t}

    def verify_cost(self, rows: int) -> Cost:
        """Measured, or linear between the nearest measured row counts (beyond the last: its slope)."""
        parts = [(self.item(key), w) for key, w in self._verify_weights(rows).items()]
        return Cost(*(sum(getattr(c, part) * w for c, w in parts) for part in ("ms", "low", "high")))

    def _drafting_key(self, event: StepEvent, tree: TreeShape | None) -> tuple | None:
        if not event.drafted and not event.tree_tokens:
            return None
        if tree is not None and event.tree_tokens is not None:
            return ("tree", tree_key(tree))  # measured with the profile: its trees are part of its cache key
        return ("chain", min(len(event.drafted), max(self.chain)))

    def item(self, key: tuple) -> Cost:
        """One measured cost by its key: ("plain", 0), ("verify", rows), ("chain", k) or ("tree", tree_key)."""
        kind, which = key
        return self.plain if kind == "plain" else {"verify": self.verify, "chain": self.chain, "tree": self.tree,
                                                   "loop": self.loop}[kind][which]

    def _plain_keys(self) -> dict[tuple, float]:
        """What one token of plain decoding costs: its forward, and the plain loop's own work where measured."""
        return {("plain", 0): 1.0, **({("loop", 0): 1.0} if 0 in self.loop else {})}

    def _step_keys(self) -> dict[tuple, float]:
        """The speculative loop's own work a step, where measured."""
        return {("loop", 1): 1.0} if 1 in self.loop else {}

    def predict(self, events: list[StepEvent], tree: TreeShape | None = None,
                plain_tokens: int = 0, drafts_cost: bool = True) -> tuple[float, float, float]:
        """(speedup, low, high) of the replayed steps `events`, and `plain_tokens` more decoded plainly (k auto's
        answers where it chose plain decoding), over plain decoding of the same tokens, the prefill left out of both
        (as the live speedup leaves it out). A weightless method's steps (`drafts_cost=False`) are priced at their
        verification alone: its proposals come from a lookup in the text, which the profile does not time."""
        steps = [e for e in events if e.step > 0]
        tokens = sum(len(e.emitted) for e in steps) + plain_tokens
        if not tokens:
            return 1.0, 1.0, 1.0
        spent: dict[tuple, float] = {key: w * plain_tokens for key, w in self._plain_keys().items()}
        for e in steps:
            drafting = self._drafting_key(e, tree) if drafts_cost else None
            if drafting is not None:
                spent[drafting] = spent.get(drafting, 0.0) + 1
            rows = len(e.tree_tokens) + 1 if e.tree_tokens is not None else len(e.drafted) + 1
            for key, w in {**self._verify_weights(rows), **self._step_keys()}.items():
                spent[key] = spent.get(key, 0.0) + w
        return self._speedup(tokens, spent)

    def verified_speedup(self, steps: list[tuple[int, int]]) -> tuple[float, float, float]:
        """(speedup, low, high) of steps given as (rows verified, tokens emitted), each priced at its verification
        alone (a weightless method's: its proposal is a lookup in the text, which the profile does not time), over
        plain decoding of the same tokens."""
        tokens = sum(emitted for _, emitted in steps)
        if not tokens:
            return 1.0, 1.0, 1.0
        spent: dict[tuple, float] = {}
        for rows, _ in steps:
            for key, w in {**self._verify_weights(rows), **self._step_keys()}.items():
                spent[key] = spent.get(key, 0.0) + w
        return self._speedup(tokens, spent)

    def expected_speedup(self, tokens_per_step: float, k: int) -> tuple[float, float, float]:
        """(speedup, low, high) of chains of k that emit `tokens_per_step` on average, over plain decoding: a step's
        tokens at the plain step's cost over drafting k and verifying k + 1 rows."""
        return self._speedup(tokens_per_step, {("chain", k): 1.0, **self._verify_weights(k + 1), **self._step_keys()})

    def _speedup(self, tokens: float, spent: dict[tuple, float]) -> tuple[float, float, float]:
        """(speedup, low, high): `tokens` at the plain step's cost over the measured costs `spent` (key -> how many
        times), at the medians; the range over the rounds resampled (the module's docstring), or, for a profile
        without its rounds, the fastest plain step over the slowest costs and the reverse."""
        plain = self._plain_keys()

        def at(value: Callable[[tuple], float]) -> float:
            return tokens * sum(w * value(key) for key, w in plain.items()) / sum(w * value(key)
                                                                                 for key, w in spent.items())

        point = at(lambda key: self.item(key).ms)
        medians = self._resampled_medians(tuple(spent) + tuple(plain))
        if medians is None:
            return (point, at(lambda key: self.item(key).low if key in plain else self.item(key).high),
                    at(lambda key: self.item(key).high if key in plain else self.item(key).low))
        spread = [at(draw.__getitem__) for draw in medians]
        return point, quantile(spread, RANGE_QUANTILES[0]), quantile(spread, RANGE_QUANTILES[1])

    def _resampled_medians(self, keys: tuple[tuple, ...]) -> list[dict[tuple, float]] | None:
        """RESAMPLES draws of the rounds with replacement (seeded: one profile, one range), each cost of `keys` as
        its median over the drawn rounds; None where a cost kept no rounds."""
        costs = {key: self.item(key).rounds for key in dict.fromkeys(keys)}
        counts = {len(r) for r in costs.values()}
        if len(counts) != 1 or 0 in counts:
            return None
        n, rng = counts.pop(), random.Random(0)
        draws = [[rng.randrange(n) for _ in range(n)] for _ in range(RESAMPLES)]
        return [{key: statistics.median(rounds[i] for i in draw) for key, rounds in costs.items()} for draw in draws]

    def load_text(self, since: float | None = None) -> str:
        """Which load the step costs were measured under, and when, for a line: "step costs measured on an idle
        machine, 3 min ago" ("just now" where measured at `since` or later: for this run)."""
        when = self.when_text(since)
        return f"step costs measured on {self.load_words()}" + (f", {when}" if when else "")

    def load_words(self) -> str:
        busy = self.measured_busy
        return ("a machine whose load was not read" if busy is None else "an idle machine" if not busy else
                f"a busy machine (another task runnable at {self.busy_share:.0%} of its timed calls)")

    def when_text(self, since: float | None = None) -> str:
        """"just now" (measured at `since` or later), "3 min ago", or "" where the time was not kept."""
        if self.measured_at is None:
            return ""
        if since is not None and self.measured_at >= since:
            return "just now"
        return f"{_age(time.time() - self.measured_at)} ago"

    def to_dict(self) -> dict:
        data = asdict(self)
        data["verify"] = {str(k): v for k, v in data["verify"].items()}
        data["chain"] = {str(k): v for k, v in data["chain"].items()}
        data["loop"] = {str(k): v for k, v in data["loop"].items()}
        return data

    @classmethod
    def from_dict(cls, data: dict) -> CostProfile:
        costs = lambda d: {key: Cost(**value) for key, value in d.items()}  # noqa: E731
        return cls(data["machine"], data["target"], data["drafter"], data["context"], Cost(**data["plain"]),
                   {int(k): v for k, v in costs(data["verify"]).items()},
                   {int(k): v for k, v in costs(data["chain"]).items()}, costs(data.get("tree", {})),
                   {int(k): v for k, v in costs(data.get("loop", {})).items()},
                   data.get("busy_share"), data.get("kernels"), data.get("code"), data.get("measured_at"))


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{max(seconds, 0):.0f} s"


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
    beside = []  # other runnable tasks as each timed call began
    read_own_gauge = getattr(target.threads, "sample", None)
    for _ in range(rounds):
        for key, run in items.items():
            beside.append(load())
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
    """What `--k auto` chose and why (with the method, where it chose among methods: choice.choose_method)."""

    k: int | None  # None: plain decoding
    predicted: dict[int, float]  # k -> predicted speedup over plain decoding (the chosen method's)
    why: str
    acceptance: tuple[float, ...] = ()  # the acceptance by position the prediction read
    costs: str = ""  # which step costs it read: their load and when (CostProfile.load_text)
    method: str | None = None  # the method chosen among several (None: the one asked, or plain decoding)
    candidates: dict[str, dict[int, float]] = field(default_factory=dict)  # method -> k -> predicted speedup

    def to_dict(self) -> dict:
        data = {"k": self.k, "predicted_speedup": {str(k): round(v, 3) for k, v in self.predicted.items()},
                "why": self.why, "acceptance_by_position": [round(a, 3) for a in self.acceptance],
                "step_costs": self.costs}
        if self.candidates:
            data["method"] = self.method
            data["predicted_by_method"] = {name: {str(k): round(v, 3) for k, v in table.items()}
                                           for name, table in self.candidates.items()}
        return data

    def short(self) -> str:
        """One clause for a status line."""
        read = f" ({self.costs})" if self.costs else ""
        if self.k is None:
            what = "method and k" if self.candidates else "k"
            return f"k auto chose plain decoding: no {what} is predicted to pay on this machine{read}"
        chose = f"{method_of(self.method).label} at k={self.k}" if self.method else f"k={self.k}"
        return f"k auto chose {chose}, predicted {self.predicted[self.k]:.2f}× on this machine{read}"


def paying(ranged: dict[int, tuple[float, float, float]], margin: float) -> list[int]:
    """The ks predicted to beat plain decoding by `margin` at the median costs and at all at the low end of their
    range."""
    return [k for k, (point, low, _) in ranged.items() if point >= margin and low > 1.0]


def choose_k(profile: CostProfile, per_position: list[float], source: str, most: int = 8,
             margin: float = 1.05, since: float | None = None) -> AutoK:
    """The k predicted fastest from the drafter's acceptance by position and this machine's step costs; plain
    decoding where none is predicted to pay: to beat it by `margin` at the median costs and to beat it at all at the
    low end of its range (a speedup inside the prediction's error is not one; on a noisy machine the range widens and
    the choice falls back to plain decoding rather than to a k that noise made look fast). The choice names the step
    costs it read (`since`: a profile measured then or later was measured for it)."""
    ranged = {k: profile.expected_speedup(expected_tokens(per_position, k), k)
              for k in range(1, min(most, len(per_position), max(profile.chain)) + 1)}
    predicted = {k: point for k, (point, _, _) in ranged.items()}
    costs = profile.load_text(since)
    if not predicted:
        return AutoK(None, {}, f"no acceptance by position in {source}: plain decoding", costs=costs)
    table = ", ".join(f"k={k} {point:.2f}x ({low:.2f}-{high:.2f})" for k, (point, low, high) in ranged.items())
    rates = tuple(per_position)
    pays = paying(ranged, margin)
    if not pays:
        return AutoK(None, predicted, f"no k is predicted to beat plain decoding by {margin - 1:.0%} with its range "
                                      f"above 1x on this machine ({table}; acceptance from {source}; {costs}): plain "
                                      "decoding", rates, costs)
    best = max(pays, key=predicted.__getitem__)
    return AutoK(best, predicted, f"k={best} is predicted fastest on this machine ({table}; acceptance from {source}; "
                                  f"{costs})", rates, costs)
