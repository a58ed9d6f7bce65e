"""Measure trained drafters on held-out prompts: acceptance by k, drift by depth, losslessness and speedup.

Acceptance and drift come from an instrumented greedy pass over the held-out split of the prompt set
(assets/prompts/held-out.jsonl), under the default template and under an unfamiliar one. Speed comes from separate
un-instrumented passes on held-out, MT-Bench and HumanEval prompts whose plain answers run to the full token budget,
plain and speculative interleaved prompt by prompt after a warm-up, so both see the same machine load. The numbers
feed the model card (`assets/models/README.md`).
"""

from __future__ import annotations

import json
import platform
import statistics
from dataclasses import asdict
from pathlib import Path

import torch
from tqdm import tqdm

from playground.backends.local import LocalBackend
from playground.engine import GenerationConfig, StepEvent, summarize
from playground.presets import get_preset
from playground.bench.prompts import load_prompt_set


def _run(backend: LocalBackend, prompt: list[int], drafter: str, cfg: GenerationConfig) -> list[StepEvent]:
    return list(backend.stream(prompt, drafter, cfg))


def _ids(events: list[StepEvent]) -> list[int]:
    return [t for e in events for t in e.emitted]


def acceptance_table(backend: LocalBackend, prompts: list[list[int]], drafters: list[str], ks: list[int],
                     max_new_tokens: int) -> dict:
    """Per drafter and k: metrics pooled over every step of every prompt, and whether output matched plain."""
    plain = [_ids(_run(backend, p, "none", GenerationConfig(max_new_tokens=max_new_tokens))) for p in prompts]
    table: dict = {}
    jobs = [(d, k) for d in drafters for k in ks]
    for drafter, k in tqdm(jobs, desc="acceptance", unit="config"):
        cfg = GenerationConfig(max_new_tokens=max_new_tokens, k=k)
        pooled, lossless = [], True
        for prompt, reference in zip(prompts, plain):
            events = _run(backend, prompt, drafter, cfg)
            lossless &= _ids(events) == reference
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


def speed_table(backend: LocalBackend, prompts: list[list[int]], drafters: list[str], k: int, max_new_tokens: int,
                repeats: int) -> dict:
    """tokens/s of plain vs speculative decoding, interleaved per prompt after a warm-up.

    Two views of the same runs: the median over prompts of the per-prompt ratio (short answers, where the prefill
    dominates, weigh as much as long ones), and the pooled rate (all tokens / all time) per repeat, median over
    repeats."""
    cfg = GenerationConfig(max_new_tokens=max_new_tokens, k=k, instrument=False)
    names = ["none", *drafters]
    for name in names:  # warm-up
        _run(backend, prompts[0], name, cfg)
    rates: dict[str, list[float]] = {name: [] for name in names}
    ratios: dict[str, list[float]] = {name: [] for name in drafters}
    pooled: dict[str, list[float]] = {name: [] for name in names}
    for _ in tqdm(range(repeats), desc="speed", unit="repeat"):
        tokens = {name: 0 for name in names}
        seconds = {name: 0.0 for name in names}
        for prompt in prompts:
            now = {}
            for name in names:
                m = summarize(_run(backend, prompt, name, cfg), k)
                now[name] = m.tokens_per_second
                tokens[name] += m.generated_tokens
                seconds[name] += m.elapsed_ms / 1000
            for name, rate in now.items():
                rates[name].append(rate)
            for name in drafters:
                ratios[name].append(now[name] / now["none"])
        for name in names:
            pooled[name].append(tokens[name] / seconds[name])
    pooled_rate = {name: statistics.median(v) for name, v in pooled.items()}
    return {
        "k": k,
        "max_new_tokens": max_new_tokens,
        "runs_per_config": len(rates["none"]),
        "median_tokens_per_second": {name: statistics.median(v) for name, v in rates.items()},
        "median_speedup": {name: statistics.median(v) for name, v in ratios.items()},
        "pooled_tokens_per_second": pooled_rate,
        "pooled_speedup": {name: pooled_rate[name] / pooled_rate["none"] for name in drafters},
        "mean_generated_tokens": tokens["none"] / len(prompts),  # greedy: the same in every repeat
    }


def first_turns(prompt_set: str) -> list[list[dict]]:
    return [record.messages([]) for record in load_prompt_set(prompt_set).records]


def long_answer_prompts(backend: LocalBackend, sets: tuple[str, ...], per_set: int, max_new_tokens: int) -> list[list[int]]:
    """Up to `per_set` prompts of each set whose plain greedy answer fills `max_new_tokens` (a speed comparison
    on answers too short to amortise the prefill would measure the prefill)."""
    chosen = []
    for name in sets:
        found = 0
        for messages in first_turns(name):
            prompt = backend.encode(messages)
            if len(_ids(_run(backend, prompt, "none", GenerationConfig(max_new_tokens=max_new_tokens,
                                                                         instrument=False)))) == max_new_tokens:
                chosen.append(prompt)
                found += 1
            if found == per_set:
                break
    return chosen


def evaluate(preset_name: str, n_prompts: int, ks: list[int], max_new_tokens: int, speed_k: int, repeats: int,
             threads: int, speed_prompts: int, speed_tokens: int, unfamiliar_template: str = "llama3") -> dict:
    torch.set_num_threads(threads)
    preset = get_preset(preset_name)
    backend = LocalBackend(preset)
    drafters = list(preset.drafters)
    held_out = first_turns("held-out")[:n_prompts]
    prompts = [backend.encode(m) for m in held_out]
    unfamiliar = [backend.encode(m, chat_template=unfamiliar_template) for m in held_out]
    speed_sets = ("held-out", "mt-bench", "humaneval")
    speed_prompts_ids = long_answer_prompts(backend, speed_sets, speed_prompts, speed_tokens)
    return {
        "preset": preset.name,
        "prompts": {"source": "assets/prompts/held-out.jsonl (first turns; never trained on)",
                    "count": len(prompts), "mean_prompt_tokens": statistics.mean(map(len, prompts)),
                    "speed_sets": list(speed_sets), "speed_count": len(speed_prompts_ids)},
        "machine": {"processor": platform.processor() or platform.machine(), "threads": threads,
                    "torch": torch.__version__, "python": platform.python_version()},
        "acceptance": acceptance_table(backend, prompts, drafters, ks, max_new_tokens),
        "unfamiliar_template": {"template": unfamiliar_template, "k": speed_k,
                                "acceptance": acceptance_table(backend, unfamiliar, drafters, [speed_k], max_new_tokens)},
        "speed": speed_table(backend, speed_prompts_ids, drafters, speed_k, speed_tokens, repeats),
    }


def main(out: Path, **kwargs) -> None:
    result = evaluate(**kwargs)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({"acceptance_k4": {d: v.get("4", {}).get("mean_acceptance_length") for d, v in result["acceptance"].items()},
                      "speed": result["speed"]}, indent=2))
