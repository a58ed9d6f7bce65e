"""Offline chat corpus built from the Python standard library that ships with this interpreter.

Three kinds of examples:

* instruction pairs mined with ``ast`` from functions/classes that have docstrings
  ("Write a Python function ..." -> source, "Explain what ``mod.name`` does." -> docstring);
* ``pydoc_data.topics`` prose ("Explain <topic> in Python." -> topic text);
* plain code documents (whole stdlib files, chunked) so the model learns code itself.

Everything is deterministic for a given Python version (recorded in :func:`corpus_info`):
file lists are sorted, per-example choices use string-seeded RNGs, and the train/validation
split hashes the *source* (module path or topic), so whole modules are held out.
"""

from __future__ import annotations

import ast
import hashlib
import random
import sys
import sysconfig
import textwrap
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

Split = Literal["train", "validation"]
Message = dict[str, str]
Conversation = dict[str, object]  # {"messages": list[Message], "source": str}

EXCLUDED_DIRS = frozenset(
    {
        "test",
        "tests",
        "idlelib",
        "lib2to3",
        "encodings",
        "ensurepip",
        "pydoc_data",
        "site-packages",
        "dist-packages",
        "tkinter",
        "turtledemo",
        "__pycache__",
    }
)

SYSTEM_PROMPTS = (
    "You are a helpful Python assistant.",
    "You are a concise coding tutor.",
    "You are an expert Python developer. Answer with clear, idiomatic code.",
    "You are a friendly assistant who explains the Python standard library.",
    "You answer programming questions precisely and briefly.",
)
NO_SYSTEM_PROMPT_FRACTION = 0.3
VALIDATION_PERCENT = 4  # of sources (modules / topics), chosen by hash
MAX_CODE_ANSWER_CHARS = 3000  # longer functions/classes are skipped as answers
MAX_PROSE_ANSWER_CHARS = 2000  # topic text / docstrings are truncated at a paragraph boundary
DOCUMENT_CHUNK_CHARS = 4000  # plain code documents are cut at line boundaries near this size
SEED = 1234


@dataclass(frozen=True)
class Document:
    """A plain (non-chat) text document used for language modelling."""

    text: str
    source: str


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def split_of(source: str) -> Split:
    """Deterministic split by hashing the source, so a whole module/topic lands on one side."""
    h = int.from_bytes(hashlib.sha1(source.encode()).digest()[:4], "big")
    return "validation" if h % 100 < VALIDATION_PERCENT else "train"


@lru_cache(maxsize=1)
def stdlib_files() -> tuple[tuple[str, Path], ...]:
    """Sorted (module name, path) pairs of the stdlib ``.py`` files that are used."""
    root = stdlib_dir()
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if any(part in EXCLUDED_DIRS for part in rel.parts[:-1]):
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if not parts:
            continue
        out.append((".".join(parts), path))
    return tuple(out)


def _truncate(text: str, limit: int) -> str:
    """Cut ``text`` at the last paragraph (or line) break before ``limit`` characters."""
    if len(text) <= limit:
        return text
    cut = text.rfind("\n\n", 0, limit)
    if cut < limit // 2:
        cut = text.rfind("\n", 0, limit)
    if cut < limit // 2:
        cut = limit
    return text[:cut].rstrip()


def _first_line(doc: str) -> str:
    line = doc.strip().split("\n\n")[0].replace("\n", " ").strip()
    return " ".join(line.split())


def _lowercase_first(sentence: str) -> str:
    sentence = sentence.rstrip(".")
    if len(sentence) > 1 and sentence[0].isupper() and not sentence[1].isupper():
        return sentence[0].lower() + sentence[1:]
    return sentence


def _with_system(messages: list[Message], rng: random.Random) -> list[Message]:
    if rng.random() < NO_SYSTEM_PROMPT_FRACTION:
        return messages
    return [{"role": "system", "content": rng.choice(SYSTEM_PROMPTS)}, *messages]


def _conversation(source: str, key: str, user: str, answer: str) -> Conversation:
    rng = random.Random(f"{SEED}:{source}:{key}")
    messages = _with_system([{"role": "user", "content": user}], rng)
    messages.append({"role": "assistant", "content": answer})
    return {"messages": messages, "source": source}


def _signature(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    args = ast.unparse(node.args)
    return f"{node.name}({args})"


def _node_source(lines: list[str], node: ast.AST) -> str:
    """Dedented source of ``node`` including decorators (faster than ``ast.get_source_segment``)."""
    start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    return textwrap.dedent("".join(lines[start - 1 : node.end_lineno])).rstrip()


def _module_conversations(module: str, text: str) -> list[Conversation]:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    lines = text.splitlines(keepends=True)
    convs: list[Conversation] = []

    def visit(node: ast.AST, owner: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            doc = ast.get_docstring(child)
            qualname = f"{owner}.{child.name}" if owner else child.name
            if doc and len(_first_line(doc)) > 10:
                summary = _lowercase_first(_first_line(doc))
                code = _node_source(lines, child)
                if isinstance(child, ast.ClassDef):
                    request = f"Write a Python class `{child.name}` that {summary}."
                elif owner:
                    request = (
                        f"Write the method `{_signature(child)}` of class `{owner}` that {summary}."
                    )
                else:
                    request = f"Write a Python function `{_signature(child)}` that {summary}."
                if len(code) <= MAX_CODE_ANSWER_CHARS:
                    convs.append(
                        _conversation(module, f"code:{qualname}", request, f"```python\n{code}\n```")
                    )
                convs.append(
                    _conversation(
                        module,
                        f"doc:{qualname}",
                        f"Explain what `{module}.{qualname}` does.",
                        _truncate(doc, MAX_PROSE_ANSWER_CHARS),
                    )
                )
            if isinstance(child, ast.ClassDef) and owner is None:
                visit(child, child.name)

    visit(tree, None)
    return convs


def _topic_conversations() -> list[Conversation]:
    from pydoc_data.topics import topics

    convs = []
    for name in sorted(topics):
        body = topics[name].strip()
        title = name.replace("-", " ")
        convs.append(
            _conversation(
                f"pydoc_topics:{name}",
                "topic",
                f"Explain {title} in Python.",
                _truncate(body, MAX_PROSE_ANSWER_CHARS),
            )
        )
    return convs


def _chunk_lines(text: str, size: int) -> list[str]:
    chunks, current, length = [], [], 0
    for line in text.splitlines(keepends=True):
        if length + len(line) > size and current:
            chunks.append("".join(current))
            current, length = [], 0
        current.append(line)
        length += len(line)
    if current:
        chunks.append("".join(current))
    return [c for c in chunks if c.strip()]


@lru_cache(maxsize=1)
def _all_examples() -> tuple[tuple[Conversation, ...], tuple[Document, ...]]:
    convs: list[Conversation] = []
    docs: list[Document] = []
    for module, path in stdlib_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        convs.extend(_module_conversations(module, text))
        docs.extend(Document(chunk, module) for chunk in _chunk_lines(text, DOCUMENT_CHUNK_CHARS))
    convs.extend(_topic_conversations())
    return tuple(convs), tuple(docs)


def build_conversations(split: Split) -> list[Conversation]:
    """Chat conversations (``{"messages": [...], "source": module}``) of one split."""
    return [c for c in _all_examples()[0] if split_of(str(c["source"])) == split]


def build_documents(split: Split) -> list[Document]:
    """Plain code documents (stdlib files in ~4 kB chunks) of one split."""
    return [d for d in _all_examples()[1] if split_of(d.source) == split]


def held_out_prompts(n: int, seed: int = 0) -> list[list[Message]]:
    """``n`` validation conversations without their assistant answer (for benchmarks).

    The selection is a seeded shuffle so the prompt kinds (code, explain, topics) are mixed.
    """
    convs = build_conversations("validation")
    random.Random(seed).shuffle(convs)
    return [list(c["messages"][:-1]) for c in convs[:n]]  # type: ignore[index]


def corpus_info() -> dict[str, object]:
    """Sizes and provenance of the corpus, for logs and the model card."""
    info: dict[str, object] = {
        "python_version": sys.version.split()[0],
        "stdlib_files": len(stdlib_files()),
        "excluded_dirs": sorted(EXCLUDED_DIRS),
    }
    for split in ("train", "validation"):
        convs = build_conversations(split)
        docs = build_documents(split)
        info[split] = {
            "conversations": len(convs),
            "documents": len(docs),
            "sources": len({str(c["source"]) for c in convs} | {d.source for d in docs}),
            "chars": sum(len(m["content"]) for c in convs for m in c["messages"])  # type: ignore[attr-defined]
            + sum(len(d.text) for d in docs),
        }
    return info
