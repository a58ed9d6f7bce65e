"""The run record: one run as data — what was asked, what came out, its metrics and its steps.

One shape for the CLI's `--json` and the app's live JSON and exports (which add their own context around it);
`from_dict` reads a saved record back typed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .config import GenerationConfig
from .trace import AttentionMass, RunMetrics, StepEvent, emitted_ids, summarize
from .tree_shape import TreeShape


@dataclass
class RunRecord:
    text: str
    token_ids: list[int]
    prompt_tokens: int
    finish_reason: str | None  # "eos" | "stop" | "length" | "cancelled"; None while running
    drafter: str  # a preset drafter's name, a drafter folder, or PLAIN for plain decoding
    config: GenerationConfig
    metrics: RunMetrics
    steps: list[StepEvent]
    prompt_ids: list[int] | None = None  # what the target read (a replay needs them); None in older records

    @classmethod
    def of(cls, events: list[StepEvent], text: str, prompt_tokens: int, drafter: str, config: GenerationConfig,
           k: int | None = None, prompt_ids: list[int] | None = None) -> RunRecord:
        """The record of `events` (metrics summarised at `k`: the engine's own where it differs from the config)."""
        return cls(text=text, token_ids=emitted_ids(events), prompt_tokens=prompt_tokens,
                   finish_reason=events[-1].finish_reason if events else None, drafter=drafter, config=config,
                   metrics=summarize(events, k or config.k), steps=list(events),
                   prompt_ids=list(prompt_ids) if prompt_ids is not None else None)

    def to_dict(self, with_steps: bool = True) -> dict:
        data = {"text": self.text, "token_ids": self.token_ids, "prompt_tokens": self.prompt_tokens,
                "finish_reason": self.finish_reason, "drafter": self.drafter, "config": asdict(self.config),
                "metrics": self.metrics.to_dict(), "prompt_ids": self.prompt_ids}
        if with_steps:
            data["steps"] = [e.to_dict() for e in self.steps]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> RunRecord:
        tree = data["config"].get("tree")
        config = dict(data["config"], stop_strings=tuple(data["config"].get("stop_strings", ())),
                      tree=TreeShape(**tree) if tree else None,
                      method_settings=tuple(tuple(pair) for pair in data["config"].get("method_settings", ())))
        metrics = dict(data["metrics"], attention_by_depth=_masses(data["metrics"].get("attention_by_depth")))
        steps = [StepEvent(**dict(s, attention=_masses(s.get("attention")))) for s in data.get("steps", [])]
        return cls(text=data["text"], token_ids=list(data["token_ids"]), prompt_tokens=data["prompt_tokens"],
                   finish_reason=data["finish_reason"], drafter=data["drafter"], config=GenerationConfig(**config),
                   metrics=RunMetrics(**metrics), steps=steps, prompt_ids=data.get("prompt_ids"))


def _masses(rows: list[dict] | None) -> list[AttentionMass] | None:
    return None if rows is None else [AttentionMass(**m) for m in rows]
