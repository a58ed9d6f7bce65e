"""What a step costs on this machine, for one target and drafter (measured and kept by engine/cost_measure.py): a
plain step, verifying N rows in one target forward, and drafting a chain of k or a tree. With a replay
(engine/replay.py) it predicts a configuration's speedup without running it: the answer's tokens at the plain
step's cost, over the sum of each replayed step's drafting and verification.

The measurement runs the engine's own calls as its loops run them (threads set per phase by the target, drafting on
one thread), at one context length, in rounds that time every item once, so a neighbour that comes and goes touches
them all alike. Each cost keeps its median, its 10th-90th percentile and its samples by round. A prediction divides
by the medians; its range is how far that moves when the medians are taken again over the rounds resampled (the
same rounds for every cost, so a neighbour that slowed one round slows all its costs together): the 10th-90th
percentile of RESAMPLES such predictions. It says how well the step costs were measured, not how a live run will
vary. What it leaves out: the context growing during an answer (costs are taken at `context` tokens), a weightless
method's lookup, and a load other than the one the costs met (a profile is kept per load: `cost_measure.pair_profile`).
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from .trace import StepEvent
from .tree_shape import TreeShape

VERIFY_ROWS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 13, 17, 25, 33)  # measured; others interpolated
CHAIN_KS = tuple(range(1, 9))
PENDING_ROWS = 3  # target features a typical step's first drafter call reads (accepted drafts + 1)
# What `measure` times and how: a profile measured by another version is measured again. Version 2: the load of each
# timed call read consistently (threads.other_runnable_tasks), the profile filed under the load it measured. Version
# 3: the samples kept by round (the prediction's range) and the time of the measurement. Version 4: the target's own
# load reading taken before each timed call, never inside it. Version 5: the loops' own work around the calls (the
# choice, acceptance, rollback, the step's event) measured per step in the real loops, plain and speculative.
CODE_VERSION = 6
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
        its median over the drawn rounds; None where a cost kept no rounds. Kept per set of keys: k auto prices
        every k of every method with the same few."""
        kept = self.__dict__.setdefault("_medians", {})
        if "every" not in kept:  # one set of draws for every cost: each key's medians the same whoever asks
            every = [("plain", 0), *(("verify", r) for r in self.verify), *(("chain", k) for k in self.chain),
                     *(("tree", t) for t in self.tree), *(("loop", n) for n in self.loop)]
            kept["every"] = self._draw_medians(tuple(every))
        if kept["every"] is not None:
            return kept["every"]
        key_set = frozenset(keys)  # costs kept with different numbers of rounds: drawn per set of keys
        if key_set not in kept:
            kept[key_set] = self._draw_medians(keys)
        return kept[key_set]

    def _draw_medians(self, keys: tuple[tuple, ...]) -> list[dict[tuple, float]] | None:
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
