"""Long-context training data: long inputs from the standard library, answered by the target, with its features.

    python -m playground train long-data --out runs/smollm2/long --engine vllm --threads 2

Three kinds of items, all from the *train* split of the stdlib corpus (`corpus.split_of` holds whole modules and
topics out by hash; the long-context evaluation uses a different library altogether, numpy, that no training stage
reads):
- `source`: whole stdlib modules back to back, cut at a line to a drawn token budget, with a question about them;
- `docs`: the standard library's own documentation (`pydoc_data.topics`) back to back, with a question about one
  topic;
- `chat`: multi-turn conversations of prompt-set requests, every turn answered by the target after its own
  earlier answers.

Budgets are drawn uniformly from [MIN_CONTEXT_TOKENS, MAX_CONTEXT_TOKENS], so the drafter sees every distance up to
a block, not one length.

Stages, each resumable (run the command again and it continues):
1. answers: the target answers greedily, turn by turn, through vLLM (batched; `--engine local`: our engine, one
   request at a time); every finished turn is appended to `answers.jsonl` and skipped on a rerun;
2. features: one teacher-forced forward of the target per conversation records the aux states and final pre-norm
   states in distill's shard format (`train/long-*.safetensors`, `validation/…`); a shard that exists is skipped.

Unlike distill's answers-only loss, `loss_mask` is 1 at every position: the document is where long-range
prediction is learned, and the teacher at each position is still the target's own distribution.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from playground.engine import GenerationConfig, Target, emitted_ids, plain_generate
from playground.train.corpus import Split, split_of, stdlib_files
from playground.train.distill import FEATURE_DTYPE, Sequence, save_shard
from playground.train.draws import prompts_for

MIN_CONTEXT_TOKENS = 600
MAX_CONTEXT_TOKENS = 3600  # + an answer of up to MAX_ANSWER_TOKENS stays inside a 4096-token training block
MAX_ANSWER_TOKENS = 256
CHAT_TURNS = (4, 7)  # turns per multi-turn conversation, drawn inclusive
RECORDS_PER_SHARD = 8
SEED = 4321

SOURCE_WRAPPERS = (
    "Here is some Python source code:\n\n```python\n{context}```\n\n{question}",
    "{question}\n\n```python\n{context}```",
    "Read the following files from a Python project.\n\n{context}\n\nQuestion: {question}",
)
SOURCE_QUESTIONS = (
    "Explain what `{name}` does.",
    "Summarize what this code provides, module by module.",
    "Write a short example that uses `{name}`.",
    "What does `{name}` return, and in which cases does it raise an exception?",
    "List the public functions and classes defined above, with one line on each.",
    "Is there anything in `{name}` that could be simplified? Show the improved version.",
)
DOC_QUESTIONS = (
    "Based on the documentation above, explain {topic} in Python with an example.",
    "Summarize the section on {topic} in a few bullet points.",
    "What is the most common mistake people make with {topic}, according to this text?",
)


@dataclass
class LongItem:
    id: str
    kind: str  # source, docs, chat
    split: str
    turns: list[str]  # the user messages, in order; the target answers each
    system: str | None = None


@dataclass
class LongDataConfig:
    n_source: int = 96
    n_docs: int = 24
    n_chat: int = 32
    n_validation: int = 8  # source items from validation modules: the drafter's validation blocks
    engine: str = "vllm"  # or "local"
    batch_size: int = 32  # requests handed to vLLM at once
    threads: int = 2
    seed: int = SEED


def _fill(blocks: Iterable[list[str]], budget: int, count: Callable[[str], int]) -> tuple[str, int]:
    """Lines of the blocks in order, cut at a line to at most `budget` tokens; and how many blocks were opened."""
    lines, tokens, opened = [], [], 0
    for block in blocks:
        opened += 1
        for line in block:
            lines.append(line)
            tokens.append(count(line))
        if sum(tokens) > budget:
            break
    total, kept = 0, []
    for line, n in zip(lines, tokens):
        if total + n > budget:
            break
        kept.append(line)
        total += n
    return "".join(kept), opened


def _public_names(text: str) -> list[str]:
    import ast

    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    return [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and not n.name.startswith("_")]


def build_items(tokenizer, cfg: LongDataConfig) -> list[LongItem]:
    """The items of both splits, deterministic for a Python version and a seed."""
    rng = random.Random(cfg.seed)
    count = lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])  # noqa: E731
    modules = {split: [(m, p) for m, p in stdlib_files() if split_of(m) == split] for split in ("train", "validation")}
    items: list[LongItem] = []

    texts: dict[Path, str] = {}

    def read(path: Path) -> str:  # a module is read once, however many items open it
        if path not in texts:
            texts[path] = path.read_text(encoding="utf-8", errors="replace")
        return texts[path]

    def source_items(split: Split, n: int) -> None:
        pool = modules[split]
        for i in range(n):
            budget = rng.randint(MIN_CONTEXT_TOKENS, MAX_CONTEXT_TOKENS)
            start = rng.randrange(len(pool))
            order = pool[start:] + pool[:start]  # the drawn module, then the ones after it
            context, opened = _fill(([f"# file: {module.replace('.', '/')}.py\n", *read(path).splitlines(keepends=True),
                                      "\n"] for module, path in order), budget, count)
            names = [f"{module}.{name}" for module, path in order[:opened] for name in _public_names(read(path))]
            first = order[0][0]
            shown = [name for name in names if f"def {name.rsplit('.', 1)[1]}" in context
                     or f"class {name.rsplit('.', 1)[1]}" in context] or [first]
            question = rng.choice(SOURCE_QUESTIONS).format(name=rng.choice(shown[:8]))
            wrapper = rng.choice(SOURCE_WRAPPERS)
            items.append(LongItem(f"source-{split}-{i:04d}", "source", split,
                                  [wrapper.format(context=context, question=question)]))

    def doc_items(n: int) -> None:
        from pydoc_data.topics import topics

        names = [name for name in sorted(topics) if split_of(f"pydoc_topics:{name}") == "train"]
        for i in range(n):
            budget = rng.randint(MIN_CONTEXT_TOKENS, MAX_CONTEXT_TOKENS)
            start = rng.randrange(len(names))
            order = names[start:] + names[:start]
            context, opened = _fill(([f"## {name}\n\n", *topics[name].strip().splitlines(keepends=True), "\n\n"]
                                     for name in order), budget, count)
            chosen = order[:opened]
            topic = rng.choice([c for c in chosen if f"## {c}\n" in context] or chosen[:1]).replace("-", " ")
            items.append(LongItem(f"docs-train-{i:04d}", "docs", "train",
                                  [f"{context}\n{rng.choice(DOC_QUESTIONS).format(topic=topic)}"]))

    def chat_items(n: int) -> None:
        requests = [item for item in prompts_for("train") if len(item.messages) and item.messages[-1]["role"] == "user"]
        rng.shuffle(requests)
        at = 0
        for i in range(n):
            turns = rng.randint(*CHAT_TURNS)
            chosen = requests[at : at + turns]
            at += turns
            system = chosen[0].messages[0]["content"] if chosen[0].messages[0]["role"] == "system" else None
            items.append(LongItem(f"chat-train-{i:04d}", "chat", "train",
                                  [item.messages[-1]["content"] for item in chosen], system))

    source_items("train", cfg.n_source)
    doc_items(cfg.n_docs)
    chat_items(cfg.n_chat)
    source_items("validation", cfg.n_validation)
    return items


# --- stage 1: answers ----------------------------------------------------------------------------------------------


def _messages(item: LongItem, answers: list[str]) -> list[dict]:
    messages = [{"role": "system", "content": item.system}] if item.system else []
    for turn, user in enumerate(item.turns[: len(answers) + 1]):
        messages.append({"role": "user", "content": user})
        if turn < len(answers):
            messages.append({"role": "assistant", "content": answers[turn]})
    return messages


def read_answers(path: Path) -> dict[str, list[dict]]:
    """id -> the answered turns in order ({"text", "prompt_ids", "answer_ids"})."""
    done: dict[str, list[dict]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                done.setdefault(row["id"], []).append(row)
    for turns in done.values():
        turns.sort(key=lambda r: r["turn"])
    return done


class _VllmAnswerer:
    def __init__(self, folder: str, threads: int) -> None:
        import os

        from playground.backends.vllm import offline_llm
        from playground.presets import DEFAULT, get_preset

        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")  # room for a batch of long ones
        cores = sorted(os.sched_getaffinity(0))[:threads]  # vLLM's own binding keeps a core back on small machines
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", ",".join(map(str, cores)))
        from vllm import SamplingParams

        self.llm = offline_llm(get_preset(f"{DEFAULT}-vllm"), None, 1, model=folder)
        self.params = SamplingParams(temperature=0.0, max_tokens=MAX_ANSWER_TOKENS)

    def answer(self, prompts: list[list[int]]) -> list[list[int]]:
        outputs = self.llm.generate([{"prompt_token_ids": p} for p in prompts], self.params, use_tqdm=False)
        return [list(o.outputs[0].token_ids) for o in outputs]

    def close(self) -> None:
        self.llm.llm_engine.engine_core.shutdown()  # its worker holds the cores the features stage needs


class _LocalAnswerer:
    def __init__(self, folder: str, threads: int) -> None:
        torch.set_num_threads(threads)
        self.target = Target.load(folder)
        self.cfg = GenerationConfig(max_new_tokens=MAX_ANSWER_TOKENS)

    def answer(self, prompts: list[list[int]]) -> list[list[int]]:
        return [emitted_ids(plain_generate(self.target, p, self.cfg)) for p in prompts]

    def close(self) -> None:
        pass


def answer_items(items: list[LongItem], folder: str, out: Path, cfg: LongDataConfig) -> None:
    """Answer every turn of every item, round by round (turn r of all items, then r + 1), appending to
    OUT/answers.jsonl; what is there already is kept."""
    from transformers import AutoTokenizer

    from playground.engine.templates import encode_chat

    tokenizer = AutoTokenizer.from_pretrained(folder)
    path = out / "answers.jsonl"
    answerer = None
    for turn in range(max(len(item.turns) for item in items)):
        done = read_answers(path)
        todo = [item for item in items if len(item.turns) > turn and len(done.get(item.id, [])) == turn]
        for start in range(0, len(todo), cfg.batch_size):
            batch = todo[start : start + cfg.batch_size]
            if answerer is None:
                answerer = (_VllmAnswerer if cfg.engine == "vllm" else _LocalAnswerer)(folder, cfg.threads)
            prompts = [encode_chat(tokenizer, _messages(item, [r["text"] for r in done.get(item.id, [])]))
                       for item in batch]
            t0 = time.perf_counter()
            answers = answerer.answer(prompts)
            with path.open("a") as f:
                for item, prompt, ids in zip(batch, prompts, answers):
                    f.write(json.dumps({"id": item.id, "turn": turn, "prompt_ids": prompt, "answer_ids": ids,
                                        "text": tokenizer.decode(ids, skip_special_tokens=True)}) + "\n")
            new = sum(map(len, answers))
            print(f"turn {turn + 1}: {start + len(batch)}/{len(todo)} answered, {sum(map(len, prompts))} prompt + "
                  f"{new} new tokens in {time.perf_counter() - t0:.0f} s", flush=True)
    if answerer is not None:
        answerer.close()


# --- stage 2: features ---------------------------------------------------------------------------------------------


@torch.inference_mode()
def conversation_features(target, tokens: list[int], aux_layers: list[int]) -> Sequence:
    """The target's aux and final pre-norm states at every position of one conversation (teacher-forced)."""
    ids = torch.tensor([tokens], device=target.device)
    capture = [*aux_layers, target.num_layers]
    _, states = target.capture_layers(capture, lambda: target.model.model(input_ids=ids, use_cache=False))
    aux = torch.cat([states[i][0] for i in aux_layers], -1).to(FEATURE_DTYPE).cpu()
    final = states[target.num_layers][0].to(FEATURE_DTYPE).cpu()
    final[-1] = 0  # nothing is fed after the last token (as distill records it)
    return Sequence(tokens, 0, aux, final)  # prompt_len 0: every position carries the loss


def write_features(items: list[LongItem], folder: str, out: Path, threads: int) -> None:
    torch.set_num_threads(threads)
    done = read_answers(out / "answers.jsonl")
    complete = [item for item in items if len(done.get(item.id, [])) == len(item.turns)]
    target = None
    for split in ("train", "validation"):
        mine = [item for item in complete if item.split == split]
        for index in range(0, len(mine), RECORDS_PER_SHARD):
            path = out / split / f"long-{index // RECORDS_PER_SHARD:05d}.safetensors"
            batch = mine[index : index + RECORDS_PER_SHARD]
            if path.exists() or len(batch) < RECORDS_PER_SHARD and split == "train" and len(complete) < len(items):
                continue  # done, or a partial shard while answers are still missing
            target = target or Target.load(folder)
            path.parent.mkdir(parents=True, exist_ok=True)
            t0 = time.perf_counter()
            aux_layers = target.default_aux_layer_ids()
            sequences = []
            for item in batch:
                last = done[item.id][-1]
                sequences.append(conversation_features(target, last["prompt_ids"] + last["answer_ids"], aux_layers))
            save_shard(path, sequences, {"aux_layers": aux_layers, "kinds": [item.kind for item in batch],
                                         "ids": [item.id for item in batch], "loss": "every position"})
            tokens = sum(len(s.tokens) for s in sequences)
            print(f"{split}/{path.name}: {len(batch)} conversations, {tokens} tokens, "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)


def build(out: Path, folder: str, cfg: LongDataConfig) -> None:
    from transformers import AutoTokenizer

    out.mkdir(parents=True, exist_ok=True)
    items = build_items(AutoTokenizer.from_pretrained(folder), cfg)
    (out / "items.json").write_text(json.dumps({"config": asdict(cfg), "items": [asdict(i) for i in items]}))
    print(f"{len(items)} items: "
          + ", ".join(f"{k} {sum(i.kind == k for i in items)}" for k in ("source", "docs", "chat")), flush=True)
    answer_items(items, folder, out, cfg)
    write_features(items, folder, out, cfg.threads)
