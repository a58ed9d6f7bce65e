"""Measure the drafter health check (docs/health.md): its false-alarm rate on prompts its fingerprint never saw, and
what it says in the cases it is built for — an unfamiliar chat template, a perturbed target, a context longer than
the drafter's training.

    PYTHONPATH=. python scripts/health_check.py --preset smollm2-135m --out assets/health/smollm2-135m.json

False alarms: plain greedy answers to the prompts after the fingerprint's in each set (held-out, mt-bench,
humaneval), replayed exactly under each k (engine/replay.py) and checked as a live run's steps would be; then live
runs at T = 0.7. The cases: live runs through the same code path as `generate`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from playground.backends.local import LocalBackend
from playground.drafting import PLAIN
from playground.engine import GenerationConfig
from playground.engine.replay import replay, teacher_force
from playground.health import check_health, run_facts, run_health
from playground.health.facts import fingerprint_for
from playground.health.measure import DEFAULT_SETS, parse_sets
from playground.machine import machine_info
from playground.presets import get_preset
from playground.prompt_sets import load_prompt_set
from playground.smollm2 import local_folder

KS = (1, 2, 4, 8)


def unseen_prompts(per_set: int) -> list[tuple[str, object]]:
    """The first `per_set` prompts after the fingerprint's own in each of its sets."""
    out = []
    for name, used in parse_sets(DEFAULT_SETS):
        records = load_prompt_set(name).records
        out += [(name, record) for record in records[used : used + per_set]]
    return out


def live(preset, backend, drafter, prompt, cfg, template="default"):
    events = list(backend.stream(prompt, drafter, cfg))
    return events, run_health(preset, backend, drafter, cfg, template, False, len(prompt), events)


def summary(health, text: bool = True) -> dict:
    out = {"status": health.status, "rate": health.depth_one_rate, "expected": health.expected,
           "steps": health.drafting_steps}
    return {**out, "text": health.text()} if text or health.flagged else out


def perturbed_copy(folder: str, scale: float, out: Path) -> Path:
    """A copy of the target with Gaussian noise of `scale` × each matrix's standard deviation added."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(folder, out)
    generator = torch.Generator().manual_seed(0)
    for path in out.glob("*.safetensors"):
        weights = load_file(str(path))
        noisy = {name: (w.float() + scale * w.float().std() * torch.randn(w.shape, generator=generator)).to(w.dtype)
                 if w.dim() == 2 else w for name, w in weights.items()}
        save_file(noisy, str(path), metadata={"format": "pt"})
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", default="smollm2-135m")
    parser.add_argument("--per-set", type=int, default=20, help="unseen prompts per set for the false-alarm rate")
    parser.add_argument("--sampled", type=int, default=20, help="of those, answered live at T=0.7")
    parser.add_argument("--cases", type=int, default=5, help="prompts for each case")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--long-set", default="numpy-8k", help="prompts longer than the drafters' training")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    preset = get_preset(args.preset)
    backend = LocalBackend(preset)
    drafters = list(preset.drafters)
    prompts = unseen_prompts(args.per_set)
    result = {"preset": preset.name, "machine": machine_info("cpu"), "per_set": args.per_set,
              "max_new_tokens": args.max_new_tokens, "false_alarms": {}, "cases": {}}
    started = time.time()
    plain = GenerationConfig(max_new_tokens=args.max_new_tokens, instrument=False)
    answers = []
    for name, record in prompts:
        prompt = backend.encode(record.messages([]))
        answers.append((name, record.question_id, prompt,
                        [t for e in backend.stream(prompt, PLAIN, plain) for t in e.emitted]))
    print(f"{len(answers)} plain answers in {time.time() - started:.0f} s", flush=True)
    for drafter in drafters:
        fingerprint = fingerprint_for(preset, drafter)
        loaded = backend.drafter(drafter)
        runs = []
        for set_name, question, prompt, answer in answers:
            try:
                forced = teacher_force(backend.target, loaded.aux_layers, prompt, answer)
            except ValueError:
                continue
            for k in KS:
                events = replay(forced, backend.target, loaded.drafter, k)
                cfg = GenerationConfig(max_new_tokens=args.max_new_tokens, k=k)
                facts = run_facts(preset, backend, drafter, cfg, "default", False, len(prompt), answer)
                health = check_health(fingerprint, facts, events)
                runs.append({"set": set_name, "question": question, "k": k, "temperature": 0.0,
                             **summary(health, text=False)})
        for i, (set_name, question, prompt, _) in enumerate(answers[: args.sampled]):
            cfg = GenerationConfig(max_new_tokens=args.max_new_tokens, k=4, temperature=0.7, seed=1000 + i)
            _, health = live(preset, backend, drafter, prompt, cfg)
            runs.append({"set": set_name, "question": question, "k": 4, "temperature": 0.7,
                         **summary(health, text=False)})
        checked = [r for r in runs if r["status"] in ("in range", "flagged")]
        flagged = [r for r in checked if r["status"] == "flagged"]
        result["false_alarms"][drafter] = {"checked": len(checked), "flagged": len(flagged),
                                           "too_few_steps": sum(r["status"] == "too few steps" for r in runs),
                                           "flagged_runs": flagged, "runs": runs}
        print(f"{drafter}: {len(flagged)} flagged of {len(checked)} checked runs "
              f"({time.time() - started:.0f} s)", flush=True)

    ordinary = [(name, record) for name, record in prompts if name == "held-out"][: args.cases]
    greedy = GenerationConfig(max_new_tokens=args.max_new_tokens, k=4)
    with tempfile.TemporaryDirectory() as tmp:
        noisy = replace(preset, target=str(perturbed_copy(local_folder(preset.target), 0.25, Path(tmp) / "noisy")))
        noisy_backend = LocalBackend(noisy)
        long_records = load_prompt_set(args.long_set).records[: args.cases]
        for drafter in drafters:
            cases = {"greedy": [], "T=0.7": [], "llama3 template": [], "perturbed target (0.25 sd)": [],
                     f"long prompt ({args.long_set})": []}
            for i, (_, record) in enumerate(ordinary):
                prompt = backend.encode(record.messages([]))
                cases["greedy"].append(summary(live(preset, backend, drafter, prompt, greedy)[1]))
                sampled = replace(greedy, temperature=0.7, seed=i)
                cases["T=0.7"].append(summary(live(preset, backend, drafter, prompt, sampled)[1]))
                llama3 = backend.encode(record.messages([]), chat_template="llama3")
                cases["llama3 template"].append(summary(live(preset, backend, drafter, llama3, greedy, "llama3")[1]))
                source = preset.drafters[drafter]
                noisy_prompt = noisy_backend.encode(record.messages([]))
                cases["perturbed target (0.25 sd)"].append(
                    summary(live(noisy, noisy_backend, source, noisy_prompt, greedy)[1]))
            for record in long_records:
                prompt = backend.encode(record.messages([]))
                cases[f"long prompt ({args.long_set})"].append(
                    summary(live(preset, backend, drafter, prompt, replace(greedy, max_new_tokens=64))[1]))
            result["cases"][drafter] = cases
            for case, rows in cases.items():
                print(f"{drafter} {case}: " + " | ".join(r["text"] for r in rows), flush=True)
    result["seconds"] = round(time.time() - started)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
