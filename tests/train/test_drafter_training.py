"""The drafter pipeline runs end to end on a tiny target: the target answers prompts (distill, with its features
recorded), then EAGLE-3 and EAGLE-3.1 train in lockstep on those records, resume, and save the official layout."""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from playground.engine import Target, load_drafter
from playground.prompt_sets import load_prompt_set
from playground.train.distill import DistillConfig, distill
from playground.train.drafter import DrafterTrainConfig, train_drafters
from playground.train.draws import build_collection, build_draw, prompts_for
from playground.train.merge import merge
from playground.train.prompts import PromptItem, build_prompts, split_of

pytestmark = pytest.mark.slow

# The GPU recipe (scripts/train_on_gpu.sh) runs these stages on CUDA; where a GPU is visible they are tested there too.
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                                reason="no CUDA GPU on this machine"))]


def _items(n: int, follow_ups: bool) -> list[PromptItem]:
    return [PromptItem("code", [{"role": "user", "content": f"Write add{i}"}],
                       "Why?" if follow_ups and i % 2 else None) for i in range(n)]


def test_prompt_set_is_diverse_deterministic_and_split() -> None:
    items = build_prompts()
    assert items == build_prompts()
    kinds = {item.kind for item in items}
    assert {"code", "explain", "writing", "maths", "reasoning", "library"} <= kinds
    assert any(item.follow_up for item in items) and any(item.messages[0]["role"] == "system" for item in items)
    train, held_out = prompts_for("train"), prompts_for("validation")
    assert len(train) + len(held_out) == len(items) and 0.02 < len(held_out) / len(items) < 0.07
    assert all(split_of(item.messages[-1]["content"]) == "validation" for item in held_out)
    assert not {i.messages[-1]["content"] for i in train} & {i.messages[-1]["content"] for i in held_out}


def test_task_collection_is_benchmark_shaped_but_not_the_benchmarks() -> None:
    """The `tasks` rounds: HumanEval-worded completions of our own functions and MT-Bench's eight categories, never
    a prompt of either benchmark, split by the same hash; the second draw repeats none of the first."""
    items = build_collection("tasks")
    assert items == build_collection("tasks") and len(items) > 500
    assert {"completion", "writing", "roleplay", "reasoning", "maths", "coding", "extraction", "stem",
            "humanities"} == {item.kind for item in items}
    completion = next(item.messages[-1]["content"] for item in items if item.kind == "completion")
    assert completion.startswith("Complete the following Python function.\n\n```python\ndef ") and '"""' in completion
    benchmarks = {turn for name in ("mt-bench", "humaneval") for r in load_prompt_set(name).records for turn in r.turns}
    assert not benchmarks & {item.messages[-1]["content"] for item in items}
    held_out = prompts_for("validation", collection="tasks")
    assert 0 < len(held_out) < len(items) and all(split_of(i.messages[-1]["content"]) == "validation" for i in held_out)
    second = build_collection("tasks2")  # the third round: the same templates drawn again, nothing the first asked
    assert second == build_collection("tasks2") and len(second) > 500
    assert {item.kind for item in second} == {item.kind for item in items}
    asked_before = {item.messages[-1]["content"] for item in items} | benchmarks
    assert not {item.messages[-1]["content"] for item in second} & asked_before
    with pytest.raises(ValueError, match="unknown prompt collection"):
        build_collection("nope")


def test_later_draws_ask_new_prompts_only() -> None:
    first, second = build_draw("tasks", 0), build_draw("tasks", 1)
    assert first == build_collection("tasks", 0) and second == build_draw("tasks", 1)
    asked = {item.messages[-1]["content"] for item in first}
    assert len(second) > 300 and not asked & {item.messages[-1]["content"] for item in second}
    assert len(second) < len(build_collection("tasks", 1))  # seed 1 repeats some of seed 0's prompts: left out
    assert all(split_of(i.messages[-1]["content"]) == "validation" for i in prompts_for("validation", 1, "tasks"))


@pytest.mark.parametrize("device", DEVICES)
def test_distill_records_answers_and_features(tiny_root: Path, tmp_path: Path, device: str) -> None:
    cfg = DistillConfig(max_new_tokens=6, batch_size=4, device=device)
    distill(str(tiny_root / "target"), tmp_path, "train", cfg, items=_items(8, follow_ups=True))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["turn1-00000.safetensors", "turn1-00001.safetensors",
                                                          "turn2-00000.safetensors"]
    distill(str(tiny_root / "target"), tmp_path / "tasks", "train", cfg, items=_items(4, False), collection="tasks")
    distill(str(tiny_root / "target"), tmp_path / "tasks", "train", cfg, items=_items(4, False), collection="tasks",
            draw=2)
    assert sorted(p.name for p in (tmp_path / "tasks").iterdir()) == ["tasks-d2-turn1-00000.safetensors",
                                                                      "tasks-turn1-00000.safetensors"]
    shard = load_file(tmp_path / "turn1-00000.safetensors")
    target = Target.load(str(tiny_root / "target"))
    offsets = shard["offsets"].tolist()
    first = shard["tokens"][offsets[0] : offsets[1]].tolist()
    prompt = target.encode_chat([{"role": "user", "content": "Write add0"}])
    assert first[: len(prompt)] == prompt and shard["loss_mask"][: len(prompt)].sum() == 0
    # the recorded features are those of a plain forward over the same tokens (the last token is never fed)
    aux_layers = target.default_aux_layer_ids()
    fresh = target.features(torch.tensor([first[:-1]]), aux_layers).aux[0]
    assert torch.allclose(shard["aux"][: len(first) - 1].float(), fresh, atol=0.05, rtol=0.02)
    assert shard["aux"][len(first) - 1].abs().sum() == 0
    assert len(load_file(tmp_path / "turn2-00000.safetensors")["offsets"]) - 1 == 4  # items 1, 3, 5, 7


@pytest.mark.parametrize("device", DEVICES)
def test_train_drafters_runs_resumes_and_saves_both_variants(tiny_root: Path, tmp_path: Path, device: str) -> None:
    data = tmp_path / "data"
    cfg = DistillConfig(max_new_tokens=24, batch_size=8, device=device)
    distill(str(tiny_root / "target"), data / "train", "train", cfg, items=_items(16, follow_ups=False))
    distill(str(tiny_root / "target"), data / "validation", "validation", cfg, items=_items(4, follow_ups=False))
    settings = dict(seq_len=32, batch_size=2, draft_vocab_size=200, eval_every=2, eval_blocks=2, warmup_steps=2,
                    device=device)
    first = train_drafters(str(tiny_root / "target"), data, tmp_path / "out", tmp_path / "run",
                           DrafterTrainConfig(steps=2, **settings))
    assert first["steps"] == 2 and set(first["final"]) == {"eagle3", "eagle3.1"}
    resumed = train_drafters(str(tiny_root / "target"), data, tmp_path / "out", tmp_path / "run",
                             DrafterTrainConfig(steps=4, **settings), resume=True)
    assert resumed["steps"] == 4 and len(resumed["history"]) == 2  # evaluations at steps 2 and 4
    target = Target.load(str(tiny_root / "target"))
    for variant, flag in (("eagle3", False), ("eagle3.1", True)):
        drafter, layout = load_drafter(tmp_path / "out" / variant)
        target.attach(drafter)
        assert layout == "official" and drafter.config.draft_vocab_size == 200
        assert (drafter.config.fc_norm, drafter.config.norm_output) == (flag, flag)
        assert load_file(tmp_path / "out" / variant / "model.safetensors")["fc.weight"].dtype == torch.float16
    # a new session without the run folder continues from the shipped weights (and their draft vocabulary)
    shipped = load_file(tmp_path / "out" / "eagle3.1" / "model.safetensors")
    again = train_drafters(str(tiny_root / "target"), data, tmp_path / "again", tmp_path / "run2",
                           DrafterTrainConfig(steps=1, init_from=str(tmp_path / "out"), **settings))
    assert again["steps"] == 1
    assert torch.equal(load_file(tmp_path / "again" / "eagle3.1" / "model.safetensors")["d2t"], shipped["d2t"])

    # WiSE-FT: the average of a pair and the pair trained from it, tensor by tensor
    merge(tmp_path / "out", tmp_path / "again", 0.25, tmp_path / "merged")
    for variant in ("eagle3", "eagle3.1"):
        base, tuned, merged = (load_file(tmp_path / d / variant / "model.safetensors")
                               for d in ("out", "again", "merged"))
        expected = (0.75 * base["fc.weight"].float() + 0.25 * tuned["fc.weight"].float()).half()
        assert torch.equal(merged["fc.weight"], expected) and not torch.equal(merged["fc.weight"], base["fc.weight"])
        assert torch.equal(merged["t2d"], base["t2d"])
        log = json.loads((tmp_path / "merged" / variant / "training_log.json").read_text())
        assert log["merge"]["alpha"] == 0.25 and log["continued_from"]["steps"] == 1
        drafter, _ = load_drafter(tmp_path / "merged" / variant)
        target.attach(drafter)
    merge(tmp_path / "out", tmp_path / "again", 0.0, tmp_path / "zero")
    shutil.copytree(tmp_path / "out", tmp_path / "in-place")  # docs/training.md's recipe writes over the base folder
    merge(tmp_path / "in-place", tmp_path / "again", 0.25, tmp_path / "in-place")
    assert all((tmp_path / "in-place" / v / f).read_bytes() == (tmp_path / "merged" / v / f).read_bytes()
               for v in ("eagle3", "eagle3.1") for f in ("model.safetensors", "training_log.json"))
    zero = load_file(tmp_path / "zero" / "eagle3.1" / "model.safetensors")
    assert zero.keys() == shipped.keys() and all(torch.equal(x, shipped[k]) for k, x in zero.items())
    with pytest.raises(ValueError, match="was not trained from"):  # the other way round is not one fine-tuning path
        merge(tmp_path / "again", tmp_path / "out", 0.5, tmp_path / "wrong")
    with pytest.raises(ValueError, match="alpha"):
        merge(tmp_path / "out", tmp_path / "again", 1.5, tmp_path / "wrong")


def test_speed_table_times_every_drafter_and_k_against_plain(pair_models, tiny) -> None:
    """The speed stage's table (the model card's speed section): one row per (drafter, k, minimum draft probability),
    ratios against the plain run of the same prompt, acceptance length and the step split from the same runs."""
    from playground.backends.local import LocalBackend
    from playground.presets import get_preset
    from playground.train.speed import speed_table

    backend = LocalBackend(get_preset("smollm2-135m"))
    table = speed_table(backend, tiny.training_prompts[:2], ["eagle3", "eagle3.1"], [1, 3], max_new_tokens=12,
                        repeats=2, sets=["one", "two"], min_draft_probs=(0.0, 0.5))
    assert table["runs_per_config"] == 4 and table["plain"]["median_ms_per_token"] > 0
    assert set(table["by_k"]) == {"1", "3"}
    for k, row in table["by_k"].items():
        assert set(row) == {"eagle3", "eagle3.1", "eagle3 adaptive 0.5", "eagle3.1 adaptive 0.5"}
        for name in ("eagle3", "eagle3.1"):
            assert int(k) - 1 < row[name]["mean_drafts_per_step"] <= int(k)  # shorter only at the token budget
            assert row[name]["min_draft_prob"] == 0 and row[f"{name} adaptive 0.5"]["min_draft_prob"] == 0.5
            assert 1 <= row[f"{name} adaptive 0.5"]["mean_drafts_per_step"] <= int(k)
        for m in row.values():
            low, high = m["speedup_range"]
            assert 0 < low <= m["median_speedup"] <= high
            assert 1 <= m["mean_acceptance_length"] <= int(k) + 1
            by_set = m["mean_acceptance_length_by_set"]
            assert (set(by_set) == {"one", "two"}
                    and min(by_set.values()) <= m["mean_acceptance_length"] <= max(by_set.values()))
            assert m["speedup_per_acceptance_length"] == pytest.approx(
                m["median_speedup"] / m["mean_acceptance_length"])
            assert m["median_draft_ms_per_step"] > 0 and m["median_verify_ms_per_step"] > 0


def test_long_context_items_are_deterministic_and_from_training_modules(tiny_root: Path) -> None:
    from transformers import AutoTokenizer

    from playground.train.corpus import split_of as module_split
    from playground.train.long_context import LongDataConfig, build_items

    tokenizer = AutoTokenizer.from_pretrained(tiny_root / "target")
    cfg = LongDataConfig(n_source=3, n_docs=2, n_chat=2, n_validation=1)
    items = build_items(tokenizer, cfg)
    assert items == build_items(tokenizer, cfg)
    assert [i.kind for i in items] == ["source"] * 3 + ["docs"] * 2 + ["chat"] * 2 + ["source"]
    assert all(len(i.turns) >= 4 for i in items if i.kind == "chat")
    for item in items:
        files = [line.split("# file: ")[1].removesuffix(".py").replace("/", ".")
                 for line in item.turns[0].splitlines() if line.startswith("# file: ")]
        assert all(module_split(name) == item.split for name in files)  # no held-out module in a training item
    assert "numpy" not in json.dumps([asdict(i) for i in items])  # the long evaluation's library


def test_long_context_records_train_one_sequence_per_block(tiny_root: Path, tmp_path: Path) -> None:
    from playground.train.drafter import DistilledData
    from playground.train.long_context import LongDataConfig, LongItem, answer_items, read_answers, write_features

    folder = str(tiny_root / "target")
    items = [LongItem(f"source-train-{i}", "source", "train", [f"def add{i}(a, b):\n    return a + b\n" * (i + 2)
                                                                + "Explain it."]) for i in range(8)]
    items += [LongItem("chat-train-0", "chat", "train", ["Write add", "Why?", "Shorter?"], "Be brief."),
              LongItem("source-validation-0", "source", "validation", ["def sub(a, b): return a - b\nExplain."])]
    cfg = LongDataConfig(engine="local", threads=1)
    answer_items(items, folder, tmp_path, cfg)
    answer_items(items, folder, tmp_path, cfg)  # a rerun answers nothing again
    answers = read_answers(tmp_path / "answers.jsonl")
    assert [len(answers[i.id]) for i in items] == [len(i.turns) for i in items]
    assert sum(1 for _ in (tmp_path / "answers.jsonl").open()) == sum(len(i.turns) for i in items)
    chat = answers["chat-train-0"]  # the third turn's prompt holds the first two answers
    assert all(t["text"] in Target.load(folder).decode(chat[2]["prompt_ids"]) for t in chat[:2] if t["text"].strip())
    write_features(items, folder, tmp_path, threads=1)
    assert (sorted(p.name for p in (tmp_path / "train").iterdir())
            == ["long-00000.safetensors", "long-00001.safetensors"])
    data = DistilledData(tmp_path / "train", seq_len=512, pack=False)
    assert len(data) == 9 and data.sequences == 9
    first = answers["source-train-0"][-1]
    tokens = first["prompt_ids"] + first["answer_ids"]
    assert int(data.lengths[0]) == len(tokens) and data.tokens[0, : len(tokens)].tolist() == tokens
    assert not data.signal[0, len(tokens) - 1 :].any() and data.signal[0, : len(tokens) - 1].all()
    assert not data.aux[0, len(tokens) :].any()  # padding past the sequence
    log = train_drafters(folder, tmp_path, tmp_path / "out", tmp_path / "run",
                         DrafterTrainConfig(steps=2, seq_len=512, batch_size=2, draft_vocab_size=200, eval_every=2,
                                            eval_blocks=1, warmup_steps=1, pack=False))
    assert log["steps"] == 2 and 0 < log["tokens_seen"] <= 4 * 512


def test_long_evaluations_merge_set_by_set_only_for_the_same_pair() -> None:
    from playground.train.evaluate_long import merge

    run = {"preset": "p", "drafter_sha256": {"eagle3": "a"}, "k": 8, "max_new_tokens": 64}
    earlier = {**run, "sets": {"numpy-8k": {"n": 8}, "numpy-1k": {"n": 1}}}
    merged = merge(earlier, {**run, "sets": {"numpy-2k": {"n": 2}, "numpy-1k": {"n": 11}}})
    assert list(merged["sets"]) == ["numpy-1k", "numpy-2k", "numpy-8k"] and merged["sets"]["numpy-1k"] == {"n": 11}
    with pytest.raises(SystemExit, match="drafter_sha256"):
        merge(earlier, {**run, "drafter_sha256": {"eagle3": "b"}, "sets": {}})
