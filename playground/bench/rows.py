"""A bench result: one typed row per (method, prompt set, template), written to and read back from results.json."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from playground.engine import AttentionMass


@dataclass
class BenchRow:
    """One (method, prompt set, template): speed, acceptance, drift and correctness. None = does not apply."""

    drafter: str  # none | eagle3 | eagle3.1 | a drafter folder | hf-greedy | prompt-lookup | hf-assisted
    label: str  # display name of the drafter or peer, without k
    kind: str  # baseline | eagle | peer
    variant: str | None  # EAGLE-3 / EAGLE-3.1, from the drafter's config
    k: int | None
    prompt_set: str
    template: str
    studies: list[str]  # report sections that read this row
    prompts: int
    prompts_skipped: int  # too long for the target's context with max_new_tokens
    context_tokens: int | None  # median first-turn prompt length (templated)
    tree_nodes: int | None = None  # a draft tree of this many nodes, k deep; None: a chain of k (or no drafter)
    k_auto: bool = False  # k auto: each answer's k chosen at its start (k is then None; auto_k says what it chose)
    auto_k: list[dict] | None = None  # k auto's choices over the first timed pass: k (None: plain), answers, why
    turns: int = 0  # generated answers per pass
    generated_tokens: int | None = None  # per pass
    tokens_per_second: float | None = None  # median over repeats
    tokens_per_second_runs: list[float] = field(default_factory=list)
    baseline_tokens_per_second: float | None = None  # `none` in the same cell, same run
    speedup: float | None = None  # tokens_per_second / baseline_tokens_per_second
    speedup_runs: list[float] = field(default_factory=list)  # per pass, against plain decoding in the same pass
    # Predicted from this machine's step costs (engine/costs.py) over the row's own steps of its first timed pass,
    # beside the measured speedup: how far the cost model is off. EAGLE rows of our engine only
    predicted_speedup: float | None = None
    predicted_range: list[float] | None = None  # over the costs' timed rounds (CostProfile.predict)
    mean_acceptance_length: float | None = None
    draft_acceptance_rate: float | None = None
    per_position_acceptance: list[float] | None = None
    verified_per_step: float | None = None  # rows the target verified per drafting step: drafts (or nodes) + 1
    draft_ms: float | None = None  # per drafting step, median over the timed passes
    verify_ms: float | None = None  # per step after the first (plain: a one-token step), median over the timed passes
    attention_by_depth: list[AttentionMass] | None = None  # per depth, from the instrumented pass
    hidden_rms_by_depth: list[float] | None = None
    instrumented_tokens_per_second: float | None = None
    lossless: bool | None = None  # greedy: identical to plain decoding on every prompt; None when sampling
    mismatched_prompts: list[str] = field(default_factory=list)
    health: dict | None = None  # the drafter held against its fingerprint: checked, flagged, flags, differences
    note: str | None = None  # why a method has no numbers here
    # how its runs ran (run_record.py: precision, forward, kernels, weights, threads), under the names
    # generate --json and the app's exports use; None for peers, which run transformers' generate
    run_fields: dict | None = None

    @property
    def k_text(self) -> str | None:
        """k as a table shows it: the number, or what k auto chose ("auto: 5", "auto: plain, 4")."""
        if not self.k_auto:
            return None if self.k is None else str(self.k)
        chosen = ", ".join("plain" if c["k"] is None else str(c["k"]) for c in self.auto_k or [])
        return f"auto: {chosen}" if chosen else "auto"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> BenchRow:
        known = {f.name for f in fields(cls)}
        row = cls(**{k: v for k, v in data.items() if k in known})
        if row.attention_by_depth is not None:
            row.attention_by_depth = [AttentionMass(**d) for d in row.attention_by_depth]
        return row


def result_cell(rows: list[dict], drafter: str, prompt_set: str = "held-out", template: str = "default",
                k: int = 8) -> dict:
    """The one row of a committed results.json (rows as written, not read back) for this drafter and cell."""
    (row,) = [r for r in rows if (r["drafter"], r["prompt_set"], r["template"], r["k"]) == (drafter, prompt_set,
                                                                                             template, k)]
    return row


@dataclass
class BenchResult:
    rows: list[BenchRow]
    config: dict
    machine: dict
    preset: str
    target: str
    started: str
    seconds: float

    def to_dict(self) -> dict:
        return {"rows": [r.to_dict() for r in self.rows], "machine": self.machine, "config": self.config,
                "preset": self.preset, "target": self.target, "started": self.started, "seconds": self.seconds}

    @classmethod
    def from_dict(cls, data: dict) -> BenchResult:
        return cls(rows=[BenchRow.from_dict(r) for r in data["rows"]], config=data["config"], machine=data["machine"],
                   preset=data["preset"], target=data["target"], started=data["started"], seconds=data["seconds"])

    @property
    def greedy(self) -> bool:
        return self.config.get("temperature", 0) == 0


