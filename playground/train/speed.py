"""Measure the speed of a preset's drafters against plain decoding, and where a speculative step spends its time.

Run it alone on the machine (nothing else decoding): plain and speculative passes are interleaved prompt by
prompt after a warm-up, so both see the same load, but a neighbour's load still changes the balance between the
memory-bound plain step and the compute-bound verification. Prompts come from the held-out, MT-Bench and HumanEval
sets, kept only when their plain greedy answer fills the token budget (shorter answers would time the prefill).
Instrumentation is off. The numbers feed the model card (`assets/models/README.md`).
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path

import torch
from tqdm import tqdm

from playground.backends.local import LocalBackend
from playground.drafting import PLAIN
from playground.engine import GenerationConfig, StepEvent, summarize
from playground.machine import machine_info
from playground.presets import get_preset
from playground.prompt_sets import load_prompt_set
from playground.train.evaluate import run_events

SPEED_SETS = ("held-out", "mt-bench", "humaneval")


def long_answer_prompts(backend: LocalBackend, per_set: int, max_new_tokens: int) -> list[tuple[str, list[int]]]:
    """(set name, prompt ids) of up to `per_set` first turns of each speed set whose plain greedy answer fills
    `max_new_tokens`."""
    chosen = []
    cfg = GenerationConfig(max_new_tokens=max_new_tokens, instrument=False)
    for name in SPEED_SETS:
        found = 0
        for record in load_prompt_set(name).records:
            prompt = backend.encode(record.messages([]))
            if run_events(backend, prompt, PLAIN, cfg)[-1].total_tokens == max_new_tokens:
                chosen.append((name, prompt))
                found += 1
            if found == per_set:
                break
    return chosen


def _step_ms(events: list[StepEvent], field: str) -> list[float]:
    """Per-step times after the prefill step (step 0 of a speculative run is the prefill)."""
    return [getattr(e, field) for e in events if e.step > 0 and getattr(e, field) is not None]


def _config_name(drafter: str, min_draft_prob: float) -> str:
    return f"{drafter} adaptive {min_draft_prob:g}" if min_draft_prob else drafter


def speed_table(backend: LocalBackend, prompts: list[list[int]], drafters: list[str], ks: list[int],
                max_new_tokens: int, repeats: int, sets: list[str] | None = None,
                min_draft_probs: tuple[float, ...] = (0.0,)) -> dict:
    """tokens/s of plain vs each (drafter, k, minimum draft probability), and the time per step split into drafting
    and verification.

    Each repeat runs every prompt once plain and once per configuration, back to back; a speculative run's ratio is
    taken against the plain run of the same prompt in the same repeat. Two views of the ratios: the median over all
    (prompt, repeat) pairs, and the pooled rate (all tokens / all time) per repeat, median over repeats. With `sets`
    (the prompt set of each prompt), the acceptance length is also given per set. A configuration with a minimum
    draft probability (adaptive draft length) is listed under its k as "<drafter> adaptive <p>"."""
    sets = sets or ["all"] * len(prompts)
    configs = [(PLAIN, 1, 0.0)] + [(d, k, p) for d in drafters for k in ks for p in min_draft_probs]

    def generation(k: int, min_draft_prob: float, max_new: int) -> GenerationConfig:
        return GenerationConfig(max_new_tokens=max_new, k=k, instrument=False, min_draft_prob=min_draft_prob)

    for name, k, p in configs:  # warm-up of every path
        run_events(backend, prompts[0], name, generation(k, p, 16))
    rates: dict[tuple, list[float]] = {c: [] for c in configs}
    ratios: dict[tuple, list[float]] = {c: [] for c in configs[1:]}
    pooled: dict[tuple, list[float]] = {c: [] for c in configs}
    draft_ms: dict[tuple, list[float]] = {c: [] for c in configs}
    verify_ms: dict[tuple, list[float]] = {c: [] for c in configs}
    steps: dict[tuple, list[StepEvent]] = {c: [] for c in configs}
    steps_by_set: dict[tuple, list[StepEvent]] = {(c, name): [] for c in configs for name in sets}
    for _ in tqdm(range(repeats), desc="speed", unit="repeat"):
        tokens = {c: 0 for c in configs}
        seconds = {c: 0.0 for c in configs}
        for prompt, set_name in zip(prompts, sets):
            now = {}
            for c in configs:
                name, k, p = c
                events = run_events(backend, prompt, name, generation(k, p, max_new_tokens))
                m = summarize(events, k)
                now[c] = m.tokens_per_second
                tokens[c] += m.generated_tokens
                seconds[c] += m.elapsed_ms / 1000
                draft_ms[c] += _step_ms(events, "draft_ms")
                verify_ms[c] += _step_ms(events, "verify_ms")
                steps[c] += events
                steps_by_set[(c, set_name)] += events
            for c, rate in now.items():
                rates[c].append(rate)
                if c in ratios:
                    ratios[c].append(rate / now[configs[0]])
        for c in configs:
            pooled[c].append(tokens[c] / seconds[c])
    plain = configs[0]
    plain_pooled = statistics.median(pooled[plain])
    by_k: dict[str, dict] = {}
    for c in configs[1:]:
        name, k, p = c
        metrics = summarize(steps[c], k)
        acceptance_length = metrics.mean_acceptance_length
        speedup = statistics.median(ratios[c])
        by_k.setdefault(str(k), {})[_config_name(name, p)] = {
            "min_draft_prob": p,
            "mean_drafts_per_step": metrics.drafted_tokens / metrics.drafting_steps,
            "median_tokens_per_second": statistics.median(rates[c]),
            "median_speedup": speedup,
            "speedup_range": [min(ratios[c]), max(ratios[c])],
            "pooled_tokens_per_second": statistics.median(pooled[c]),
            "pooled_speedup": statistics.median(pooled[c]) / plain_pooled,
            "mean_acceptance_length": acceptance_length,
            "mean_acceptance_length_by_set": {set_name: summarize(steps_by_set[(c, set_name)], k).mean_acceptance_length
                                              for set_name in dict.fromkeys(sets)},
            "speedup_per_acceptance_length": speedup / acceptance_length if acceptance_length else None,
            "median_draft_ms_per_step": statistics.median(draft_ms[c]),
            "median_verify_ms_per_step": statistics.median(verify_ms[c]),
        }
    return {
        "max_new_tokens": max_new_tokens,
        "runs_per_config": len(rates[plain]),
        "plain": {"median_tokens_per_second": statistics.median(rates[plain]),
                  "pooled_tokens_per_second": plain_pooled,
                  "median_ms_per_token": statistics.median(verify_ms[plain])},
        "by_k": by_k,
    }


def measure(preset_name: str, ks: list[int], prompts_per_set: int, max_new_tokens: int, repeats: int,
            threads: int, min_draft_probs: tuple[float, ...] = (0.0,)) -> dict:
    torch.set_num_threads(threads)
    preset = get_preset(preset_name)
    backend = LocalBackend(preset)
    chosen = long_answer_prompts(backend, prompts_per_set, max_new_tokens)
    sets, prompts = [name for name, _ in chosen], [prompt for _, prompt in chosen]
    if not prompts:
        raise SystemExit(f"no prompt of {', '.join(SPEED_SETS)} has a plain answer of {max_new_tokens} tokens")
    return {
        "preset": preset.name,
        "prompts": {"sets": list(SPEED_SETS), "count": len(prompts), "per_set": dict(Counter(sets)),
                    "mean_prompt_tokens": statistics.mean(map(len, prompts))},
        "machine": machine_info(preset.device),
        "speed": speed_table(backend, prompts, list(preset.drafters), ks, max_new_tokens, repeats, sets,
                             min_draft_probs),
    }


def main(out: Path, **kwargs) -> None:
    result = measure(**kwargs)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    speed = result["speed"]
    print(json.dumps({"plain_tokens_per_second": speed["plain"]["median_tokens_per_second"],
                      "median_speedup": {k: {d: round(m["median_speedup"], 3) for d, m in row.items()}
                                         for k, row in speed["by_k"].items()}}, indent=2))
