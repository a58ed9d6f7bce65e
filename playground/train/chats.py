"""Conversations for drafter training at scale: prompts the target writes itself, answered by the target itself.

Where a prompt comes from (`seed_for`, deterministic from the shard and the index):
- **Magpie**: the chat template opened at a user turn (a system prompt or the default one, then `<|im_start|>user\\n`
  and, for most kinds, the first words of a request: "Write a Python function that", "Explique-moi", ...) and left
  to the target to continue, sampled, until it closes the turn. So the requests are in the target's own words, across
  what a playground visitor writes: chat, advice, explanations, writing, reasoning, code, several languages;
- **given text**: a passage of Python's standard library (a docstring's prose, or a function's code) with an
  instruction to summarise, rewrite, explain, comment, fix or translate it: editing given text;
- **the project's collections** (`prompts.py`, `task_prompts.py`, drawn with seeds no earlier training used).
Prompts are deduplicated (on their words, case and punctuation aside) and never share a run of `SHINGLE` words with
an evaluation set (every file in assets/prompts: held-out, MT-Bench, HumanEval, the long-context, multilingual,
rewriting and code-editing sets); a 2 % hash of the text is kept back for validation.

Answers are the default target's own, on the weights it runs (int4 in C): greedy for most, sampled for some
(`SAMPLED_SHARE`), up to `MAX_NEW_TOKENS`; one conversation in `FOLLOW_UP_SHARE` gets a second user turn, which the
target writes too (Magpie again, after its own first answer), and a second answer.

Output: `shard-NNNNN.jsonl` per `SHARD_SIZE` seeds, written whole and atomically, so a run that stops (or a machine
that restarts) resumes at the first missing shard and repeats nothing: every random choice derives from the shard's
number, and deduplication reads the shards before it. A line is one conversation: its token ids, the spans of the
target's answers in them, its turns' text, kind, split and whether it was sampled."""

from __future__ import annotations

import ast
import hashlib
import json
import random
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from playground.engine.batching import Job, generate_batched
from playground.train.corpus import stdlib_files
from playground.train.draws import build_draw
from playground.train.prompts import SYSTEM_PROMPTS

SHARD_SIZE = 500  # seeds a shard holds (fewer conversations once filtered)
MAX_NEW_TOKENS = 200  # an answer's tokens at most (the first two shards of the shipped run: 300)
PROMPT_TOKENS = 96  # a Magpie request longer than this is cut off: dropped
SAMPLED_SHARE = 0.2  # answers sampled (temperature 0.7, top-p 0.9) rather than greedy
FOLLOW_UP_SHARE = 0.15
VALIDATION_PERCENT = 2
SHINGLE = 8  # words in a row that no training prompt may share with an evaluation prompt
BATCH = 48  # sequences decoded together
FIRST_DRAW = 10  # the collections' draws used here start at this seed (the shipped drafters saw draws 0..2)
MAGPIE_TEMPERATURE, MAGPIE_TOP_P = 1.0, 0.95

# (kind, share, the first words of a request: "" lets the target start it)
MAGPIE_KINDS = (
    ("chat", 0.16, ("", "", "", "Hi! ", "Hey, ", "I have a question: ", "Can you help me with something? ")),
    ("advice", 0.08, ("How can I ", "What should I do if ", "Any tips for ", "I want to ", "What's the best way to ",
                      "How do I deal with ")),
    ("explain", 0.12, ("Explain ", "What is ", "Why do ", "How does ", "What are the differences between ",
                       "Can you explain how ", "Explain to a child ")),
    ("writing", 0.11, ("Write a short story about ", "Write a poem about ", "Write an email to ", "Write a blog post "
                       "about ", "Write a product description for ", "Write a speech about ", "Write a letter ")),
    ("code", 0.14, ("Write a Python function that ", "How do I ", "Write a JavaScript function that ", "In Python, ",
                    "Write a SQL query that ", "Write a bash script that ", "What does this code do?\n",
                    "Implement a class ", "Write a C function that ", "Fix the bug in this code:\n")),
    ("reasoning", 0.07, ("Solve: ", "If ", "A train ", "What is the probability that ", "Calculate ",
                         "How many ", "Is it true that ")),
    ("multilingual", 0.08, ("Explique-moi ", "Écris ", "¿Puedes explicarme ", "Escribe ", "Erkläre mir ",
                            "Schreibe ", "Spiegami ", "Explique ", "Traduis en anglais : ", "Translate into French: ",
                            "Translate into Spanish: ", "请解释", "日本語で")),
)
PASSAGE_SHARE = 0.14
COLLECTION_SHARE = 0.10
PROSE_TASKS = ("Summarize the following text in two sentences:", "Rewrite this text in simpler words:",
               "What are the key points of this text?", "Turn this text into a bulleted list:",
               "Fix the grammar and make this text clearer:", "Translate this text into French:",
               "Write a short title for this text:", "Explain this to a beginner:")
CODE_TASKS = ("Explain what this code does:", "Add comments to this code:", "Write unit tests for this function:",
              "Rewrite this code to be more readable:", "Find possible bugs in this code:",
              "Rename the variables in this code to clearer names. Reply with the code only.",
              "Translate this Python code into JavaScript:", "Write a docstring for this function:")


@dataclass
class Seed:
    kind: str
    system: str | None  # None: the chat template's default
    opening: str  # the user turn's first words (Magpie), or the whole request (given text, collections)
    magpie: bool
    sampled: bool
    follow_up: bool
    index: int
    collection_follow_up: str | None = None  # a collection item's own second turn


@dataclass
class Conversation:
    seed: Seed
    turns: list[str] = field(default_factory=list)  # the user's
    ids: list[int] = field(default_factory=list)
    answers: list[list[int]] = field(default_factory=list)  # [start, end) of each answer in ids


def normalised(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def split_of(text: str) -> str:
    h = int.from_bytes(hashlib.sha1(normalised(text).encode()).digest()[:4], "big")
    return "validation" if h % 100 < VALIDATION_PERCENT else "train"


def evaluation_shingles(folder: Path) -> set[tuple[str, ...]]:
    """Every run of `SHINGLE` words in every prompt of the evaluation sets (assets/prompts/*.jsonl)."""
    shingles: set[tuple[str, ...]] = set()
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                for turn in json.loads(line).get("turns", []):
                    words = normalised(turn).split()
                    shingles.update(tuple(words[i : i + SHINGLE]) for i in range(len(words) - SHINGLE + 1))
    return shingles


def overlaps(text: str, shingles: set[tuple[str, ...]]) -> bool:
    words = normalised(text).split()
    return any(tuple(words[i : i + SHINGLE]) in shingles for i in range(len(words) - SHINGLE + 1))


class Passages:
    """Prose (docstrings) and code (function sources) from Python's standard library, for the given-text kinds."""

    def __init__(self) -> None:
        self.prose: list[str] = []
        self.code: list[str] = []
        for _, path in stdlib_files():
            try:
                text = path.read_text(encoding="utf-8")
                tree = ast.parse(text)
            except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
                continue
            lines = text.splitlines()
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Module)):
                    doc = ast.get_docstring(node)
                    if doc and 200 <= len(doc) <= 1500 and doc.count(">>>") == 0:
                        self.prose.append(doc.strip())
                if isinstance(node, ast.FunctionDef) and node.end_lineno:
                    source = "\n".join(lines[node.lineno - 1 : node.end_lineno])
                    if 6 <= source.count("\n") <= 40 and len(source) <= 1500:
                        self.code.append(_dedent(source))

    def request(self, rng: random.Random) -> tuple[str, str]:
        if rng.random() < 0.5:
            return "summarise", f"{rng.choice(PROSE_TASKS)}\n\n{rng.choice(self.prose)}"
        return "code-editing", f"{rng.choice(CODE_TASKS)}\n\n```python\n{rng.choice(self.code)}\n```"


def _dedent(source: str) -> str:
    lines = source.splitlines()
    indent = min((len(line) - len(line.lstrip()) for line in lines if line.strip()), default=0)
    return "\n".join(line[indent:] for line in lines)


def seed_for(shard: int, index: int, passages: Passages, collection: list) -> Seed:
    rng = random.Random(f"chats:{shard}:{index}")
    sampled, follow_up = rng.random() < SAMPLED_SHARE, rng.random() < FOLLOW_UP_SHARE
    system = None if rng.random() < 0.5 else rng.choice(SYSTEM_PROMPTS)
    roll = rng.random()
    if roll < PASSAGE_SHARE:
        kind, request = passages.request(rng)
        return Seed(kind, system, request, False, sampled, follow_up, index)
    if roll < PASSAGE_SHARE + COLLECTION_SHARE and collection:
        item = collection[(shard * SHARD_SIZE + index) % len(collection)]
        system = next((m["content"] for m in item.messages if m["role"] == "system"), None)
        return Seed(f"collection-{item.kind}", system, item.messages[-1]["content"], False, sampled,
                    item.follow_up is not None, index, item.follow_up)
    kind, _, openings = _weighted(MAGPIE_KINDS, rng.random())
    return Seed(kind, system, rng.choice(openings), True, sampled, follow_up, index)


def _weighted(kinds: tuple, roll: float) -> tuple:
    """The kind that `roll` (in [0, 1)) lands on, each kind taking its share of the whole."""
    pick = roll * sum(share for _, share, _ in kinds)
    for kind in kinds:
        pick -= kind[1]
        if pick <= 0:
            return kind
    return kinds[-1]


def _system_turn(system: str | None) -> list[dict]:
    return [] if system is None else [{"role": "system", "content": system}]


def _open_user_turn(tokenizer, messages: list[dict], opening: str) -> list[int]:
    """The ids of `messages` in the chat template followed by an opened user turn that begins with `opening`."""
    ids = list(tokenizer.apply_chat_template(messages or [{"role": "user", "content": "x"}], tokenize=True,
                                             add_generation_prompt=False, return_dict=False))
    if not messages:  # the template's default system turn alone: drop the placeholder user turn
        cut = tokenizer.convert_tokens_to_ids("<|im_start|>")
        ids = ids[: len(ids) - 1 - ids[::-1].index(cut)]
    # the opening without its last space: the target's next word brings its own, as the tokenizer writes words
    return ids + tokenizer("<|im_start|>user\n" + opening.rstrip(" "), add_special_tokens=False)["input_ids"]


def _request(tokenizer, tokens: list[int], why: str, opening: str = "") -> str | None:
    """A request the target wrote (after `opening`), or None where it is unusable: cut off, a template token inside,
    under three words, or a loop."""
    if why != "stop":
        return None
    body = tokenizer.decode(tokens[:-1])
    text = (opening.rstrip(" ") + body).strip()
    words = text.split()
    if len(words) < 3 or "<|im_" in body or len(set(words)) < 0.5 * len(words):
        return None
    return text


class ChatWriter:
    """Writes shards of conversations into `out` with `target` (an int4 `Target`)."""

    def __init__(self, target, out: Path, evaluation_dir: Path, batch: int = BATCH, shard_size: int = SHARD_SIZE,
                 max_new_tokens: int = MAX_NEW_TOKENS, log=lambda line: print(line, flush=True)) -> None:
        self.target, self.model, self.tokenizer = target, target.fast, target.tokenizer
        self.out, self.batch, self.shard_size, self.log = out, batch, shard_size, log
        self.max_new_tokens = max_new_tokens
        self.stop = frozenset(target.eos_ids)
        self.passages = Passages()
        self.collection = [p for draw in range(FIRST_DRAW, FIRST_DRAW + 3) for name in ("base", "tasks")
                           for p in build_draw(name, draw)]
        random.Random(0).shuffle(self.collection)
        self.shingles = evaluation_shingles(evaluation_dir)
        self.seen: set[str] = set()
        out.mkdir(parents=True, exist_ok=True)

    def _jobs(self, conversations: list[Conversation], prompts: list[list[int]], sample: list[bool],
              limit: int) -> Iterator[Job]:
        for i, (conversation, prompt, sampled) in enumerate(zip(conversations, prompts, sample)):
            seed = conversation.seed.index * 7 + len(conversation.turns)
            yield Job(prompt, limit, self.stop, MAGPIE_TEMPERATURE if sampled is None else (0.7 if sampled else 0.0),
                      MAGPIE_TOP_P if sampled is None else 0.9, seed, i)

    def _run(self, jobs: Iterator[Job]) -> dict[int, tuple[list[int], str]]:
        return {job.tag: (tokens, why) for job, tokens, why in generate_batched(self.model, jobs, self.batch,
                                                                               self.target.max_positions)}

    def _accept(self, text: str) -> bool:
        key = normalised(text)
        if not key or key in self.seen or overlaps(text, self.shingles):
            return False
        self.seen.add(key)
        return True

    def write_shard(self, shard: int) -> dict:
        start = time.monotonic()
        tok = self.tokenizer
        seeds = [seed_for(shard, i, self.passages, self.collection) for i in range(self.shard_size)]
        magpie = [s for s in seeds if s.magpie]
        openings = [_open_user_turn(tok, _system_turn(s.system), s.opening) for s in magpie]
        written = self._run(self._jobs([Conversation(s) for s in magpie], openings, [None] * len(magpie),
                                       PROMPT_TOKENS))
        requests = {id(s): _request(tok, *written[i], s.opening) for i, s in enumerate(magpie)}
        conversations: list[Conversation] = []
        for s in seeds:
            text = requests.get(id(s)) if s.magpie else s.opening.strip()
            if text is not None and self._accept(text):
                conversations.append(Conversation(s, [text]))
        self._answer(conversations)
        second: list[Conversation] = []
        asked = []
        for c in conversations:
            if not (c.seed.follow_up and c.answers):
                continue
            if c.seed.collection_follow_up:
                c.turns.append(c.seed.collection_follow_up)
                second.append(c)
            else:
                asked.append(c)
        openings = [c.ids + tok("<|im_start|>user\n", add_special_tokens=False)["input_ids"] for c in asked]
        written = self._run(self._jobs(asked, openings, [None] * len(asked), PROMPT_TOKENS))
        for i, c in enumerate(asked):
            text = _request(tok, *written[i])
            if text is not None and self._accept(text):
                c.turns.append(text)
                second.append(c)
        self._answer(second)
        lines = [json.dumps({"kind": c.seed.kind, "system": c.seed.system, "turns": c.turns, "ids": c.ids,
                             "answers": c.answers, "sampled": c.seed.sampled, "split": split_of(c.turns[0]),
                             "shard": shard, "index": c.seed.index, "max_new_tokens": self.max_new_tokens},
                            ensure_ascii=False)
                  for c in conversations if c.answers]
        path = self.out / f"shard-{shard:05d}.jsonl"
        scratch = path.with_suffix(".tmp")
        scratch.write_text("\n".join(lines) + "\n")
        scratch.replace(path)
        answered = sum(end - begin for c in conversations for begin, end in c.answers)
        summary = {"shard": shard, "conversations": len(lines), "answer_tokens": answered,
                   "tokens": sum(len(c.ids) for c in conversations if c.answers),
                   "seconds": round(time.monotonic() - start, 1)}
        self.log(json.dumps(summary))
        return summary

    def _answer(self, conversations: list[Conversation]) -> None:
        """The target's answer to each conversation's last user turn, appended to its ids."""
        tok = self.tokenizer
        prompts = []
        for c in conversations:
            if not c.ids:
                messages = _system_turn(c.seed.system) + [{"role": "user", "content": c.turns[0]}]
                prompts.append(self.target.encode_chat(messages))
            else:
                turn = f"<|im_start|>user\n{c.turns[-1]}<|im_end|>\n<|im_start|>assistant\n"
                prompts.append(c.ids + tok(turn, add_special_tokens=False)["input_ids"])
        answers = self._run(self._jobs(conversations, prompts, [c.seed.sampled for c in conversations],
                                       self.max_new_tokens))
        for i, c in enumerate(conversations):
            tokens, why = answers[i]
            if why == "context" or not tokens:
                continue
            ended = tokens if tokens[-1] in self.stop else tokens + [tok.convert_tokens_to_ids("<|im_end|>")]
            c.ids = prompts[i] + ended + tok("\n", add_special_tokens=False)["input_ids"]
            c.answers.append([len(prompts[i]), len(prompts[i]) + len(tokens)])

    def remember(self, path: Path) -> None:
        """Count an earlier shard's prompts as seen (resuming: deduplication spans the shards)."""
        for line in path.read_text().splitlines():
            if line.strip():
                for turn in json.loads(line)["turns"]:
                    self.seen.add(normalised(turn))

    def run(self, shards: int) -> None:
        for shard in range(shards):
            path = self.out / f"shard-{shard:05d}.jsonl"
            if path.exists():
                self.remember(path)
            else:
                self.write_shard(shard)
