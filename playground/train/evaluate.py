"""Measure trained drafters on held-out prompts: acceptance by k, drift by depth and losslessness.

Everything comes from an instrumented greedy pass over the held-out split of the prompt set
(assets/prompts/held-out.jsonl), under the default template and under an unfamiliar one. Timing does not matter
here, so it can share the machine; speed is measured on its own by `playground.train.speed`. The numbers feed the
model card (`assets/models/README.md`).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict
from pathlib import Path

import torch
from tqdm import tqdm

from playground.backends.local import LocalBackend
from playground.drafting import PLAIN
from playground.engine import GenerationConfig, StepEvent, emitted_ids, summarize
from playground.machine import machine_info
from playground.presets import get_preset, with_drafters
from playground.prompt_sets import load_prompt_set
from playground.train.evaluate_long import drafter_digests

HELD_OUT_PROMPTS = 12  # `train evaluate`'s default number of held-out prompts


def evaluate_command(evaluation: dict, extra: str = "") -> str:
    """The `train evaluate` command line that wrote `evaluation` (its prompt count when not the default)."""
    count = evaluation["prompts"]["count"]
    return ("python -m playground train evaluate" + (f" --prompts {count}" if count != HELD_OUT_PROMPTS else "")
            + extra)


def run_events(backend: LocalBackend, prompt: list[int], drafter: str, cfg: GenerationConfig) -> list[StepEvent]:
    return list(backend.stream(prompt, drafter, cfg))


def acceptance_table(backend: LocalBackend, prompts: list[list[int]], drafters: list[str], ks: list[int],
                     max_new_tokens: int) -> dict:
    """Per drafter and k: metrics pooled over every step of every prompt, and whether output matched plain."""
    plain_cfg = GenerationConfig(max_new_tokens=max_new_tokens)
    plain = [emitted_ids(run_events(backend, p, PLAIN, plain_cfg)) for p in prompts]
    table: dict = {}
    jobs = [(d, k) for d in drafters for k in ks]
    for drafter, k in tqdm(jobs, desc="acceptance", unit="config"):
        cfg = GenerationConfig(max_new_tokens=max_new_tokens, k=k)
        pooled, lossless = [], True
        for prompt, reference in zip(prompts, plain):
            events = run_events(backend, prompt, drafter, cfg)
            lossless &= emitted_ids(events) == reference
            pooled += events
        m = summarize(pooled, k)
        table.setdefault(drafter, {})[str(k)] = {
            "mean_acceptance_length": m.mean_acceptance_length,
            "per_position_acceptance": m.per_position_acceptance,
            "draft_acceptance_rate": m.draft_acceptance_rate,
            "attention_by_depth": [asdict(a) for a in m.attention_by_depth or []],
            "hidden_rms_by_depth": m.hidden_rms_by_depth,
            "lossless": lossless,
        }
    return table


def first_turns(prompt_set: str) -> list[list[dict]]:
    return [record.messages([]) for record in load_prompt_set(prompt_set).records]


def evaluate(preset_name: str, n_prompts: int, ks: list[int], max_new_tokens: int, template_k: int, threads: int,
             unfamiliar_template: str = "llama3", drafters_dir: Path | None = None) -> dict:
    torch.set_num_threads(threads)
    preset = with_drafters(get_preset(preset_name), drafters_dir)
    backend = LocalBackend(preset)
    drafters = list(preset.drafters)
    held_out = first_turns("held-out")[:n_prompts]
    prompts = [backend.encode(m) for m in held_out]
    unfamiliar = [backend.encode(m, chat_template=unfamiliar_template) for m in held_out]
    return {
        "preset": preset.name,
        "drafter_sha256": drafter_digests(preset.drafters),
        "prompts": {"source": "assets/prompts/held-out.jsonl (first turns; never trained on)",
                    "count": len(prompts), "mean_prompt_tokens": statistics.mean(map(len, prompts))},
        "machine": machine_info(preset.device),
        "acceptance": acceptance_table(backend, prompts, drafters, ks, max_new_tokens),
        "unfamiliar_template": {"template": unfamiliar_template, "k": template_k,
                                "acceptance": acceptance_table(backend, unfamiliar, drafters, [template_k],
                                                               max_new_tokens)},
    }


def main(out: Path, **kwargs) -> None:
    result = evaluate(**kwargs)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({"mean_acceptance_length": {d: {k: round(m["mean_acceptance_length"], 3) for k, m in v.items()}
                                                 for d, v in result["acceptance"].items()}}, indent=2))
