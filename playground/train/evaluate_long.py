"""Long-context evaluation of a pair of drafters: acceptance at k = 8 on held-out long prompts, prompt by prompt.

    python -m playground train evaluate-long                                  # the shipped pair
    python -m playground train evaluate-long --drafters runs/smollm2/long-drafters --out runs/candidate.json

The prompts (`assets/prompts/numpy-{1k,2k,4k,8k}.jsonl`) are numpy source before a question about it: a library no
training stage reads, chosen by rule in scripts/build_prompt_sets.py. Every prompt runs greedily with each drafter,
instrumented, and once without speculation, so losslessness is checked on every prompt. Reported per length: each
drafter's mean acceptance length per prompt (and its median, minimum and maximum over the prompts), the EAGLE-3.1 /
EAGLE-3 ratio (of the medians, and the median of the per-prompt ratios), and, pooled over the prompts' steps,
acceptance by position, attention on the context and hidden-state RMS by depth.

`--update` adds the sets it ran to an existing file of the same pair and settings (a long evaluation can run set by
set, in several processes). Plain decoding does not depend on the drafters, so `--reuse-plain EARLIER.json` takes the
plain answers from an earlier evaluation of the same prompts (checked by the prompts' token ids) instead of decoding
them again.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from dataclasses import asdict
from pathlib import Path

import torch
from tqdm import tqdm

from playground.backends.local import LocalBackend
from playground.drafting import EAGLE3, EAGLE3_1, PLAIN
from playground.engine import GenerationConfig, emitted_ids, summarize
from playground.machine import machine_info
from playground.presets import get_preset, with_drafters
from playground.prompt_sets import load_prompt_set

LONG_SETS = ("numpy-1k", "numpy-2k", "numpy-4k", "numpy-8k")
LONG_K = 8
RATIO_KEY = "eagle3.1_over_eagle3"  # a prompt set's EAGLE-3.1 / EAGLE-3 acceptance in the result file


def drafter_digests(drafters: dict[str, str]) -> dict[str, str]:
    """SHA-256 of each drafter's weights: ties a measurement to the files it measured, wherever they lie."""
    return {name: hashlib.sha256((Path(folder) / "model.safetensors").read_bytes()).hexdigest()
            for name, folder in drafters.items() if (Path(folder) / "model.safetensors").exists()}


def prompt_key(ids: list[int]) -> str:
    return hashlib.sha1(json.dumps(ids).encode()).hexdigest()


def evaluate_long(preset_name: str, drafters_dir: Path | None, sets: tuple[str, ...], k: int, max_new_tokens: int,
                  limit: int | None, threads: int, reuse_plain: Path | None = None) -> dict:
    torch.set_num_threads(threads)
    preset = with_drafters(get_preset(preset_name), drafters_dir)
    backend = LocalBackend(preset)
    drafters = list(preset.drafters)
    earlier = {}
    if reuse_plain is not None:
        old = json.loads(reuse_plain.read_text())
        earlier = {p["prompt_key"]: p["plain_ids"] for cell in old["sets"].values() for p in cell["prompts"]}
    result: dict = {"preset": preset.name, "drafters": preset.drafters,
                    "drafter_sha256": drafter_digests(preset.drafters), "k": k, "max_new_tokens": max_new_tokens,
                    "machine": machine_info(preset.device), "sets": {}}
    cfg = GenerationConfig(max_new_tokens=max_new_tokens, k=k)
    for name in sets:
        records = load_prompt_set(name, limit).records
        cell: dict = {"source": f"assets/prompts/{name}.jsonl", "prompts": [], "drafters": {}}
        pooled: dict[str, list] = {d: [] for d in drafters}
        for record in tqdm(records, desc=name, unit="prompt"):
            ids = backend.encode(record.messages([]))
            key = prompt_key(ids)
            plain = earlier.get(key)
            if plain is None:
                plain = emitted_ids(backend.stream(ids, PLAIN, GenerationConfig(max_new_tokens=max_new_tokens)))
            row = {"question_id": record.question_id, "src_id": record.src_id, "prompt_tokens": len(ids),
                   "prompt_key": key, "plain_ids": plain}
            for drafter in drafters:
                events = list(backend.stream(ids, drafter, cfg))
                pooled[drafter] += events
                m = summarize(events, k)
                row[drafter] = {"mean_acceptance_length": m.mean_acceptance_length,
                                "lossless": emitted_ids(events) == plain}
            cell["prompts"].append(row)
        cell["median_prompt_tokens"] = statistics.median(p["prompt_tokens"] for p in cell["prompts"])
        for drafter in drafters:
            lengths = [p[drafter]["mean_acceptance_length"] for p in cell["prompts"]]
            m = summarize(pooled[drafter], k)
            cell["drafters"][drafter] = {
                "median_acceptance_length": statistics.median(lengths), "min": min(lengths), "max": max(lengths),
                "pooled_acceptance_length": m.mean_acceptance_length,
                "per_position_acceptance": m.per_position_acceptance,
                "attention_by_depth": [asdict(a) for a in m.attention_by_depth or []],
                "hidden_rms_by_depth": m.hidden_rms_by_depth,
                "lossless": all(p[drafter]["lossless"] for p in cell["prompts"]),
            }
        if {EAGLE3, EAGLE3_1} <= set(drafters):
            a, b = cell["drafters"][EAGLE3_1], cell["drafters"][EAGLE3]
            cell[RATIO_KEY] = {
                "ratio_of_medians": a["median_acceptance_length"] / b["median_acceptance_length"],
                "median_of_ratios": statistics.median(p[EAGLE3_1]["mean_acceptance_length"]
                                                      / p[EAGLE3]["mean_acceptance_length"]
                                                      for p in cell["prompts"]),
            }
        result["sets"][name] = cell
    return result


SAME_RUN = ("preset", "drafter_sha256", "k", "max_new_tokens")


def merge(earlier: dict, result: dict) -> dict:
    """`result`'s sets over an earlier evaluation's of the same pair and settings (`--update`), in LONG_SETS order."""
    differ = [key for key in SAME_RUN if earlier[key] != result[key]]
    if differ:
        raise SystemExit(f"--update: the earlier evaluation differs in {', '.join(differ)}; write a new file instead")
    sets = {**earlier["sets"], **result["sets"]}
    order = [name for name in LONG_SETS if name in sets] + [name for name in sets if name not in LONG_SETS]
    return {**result, "sets": {name: sets[name] for name in order}}


def main(out: Path, update: bool = False, **kwargs) -> None:
    result = evaluate_long(**kwargs)
    if update and out.exists():
        result = merge(json.loads(out.read_text()), result)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    for name, cell in result["sets"].items():
        medians = {d: round(v["median_acceptance_length"], 3) for d, v in cell["drafters"].items()}
        print(name, int(cell["median_prompt_tokens"]), medians, cell.get(RATIO_KEY))
