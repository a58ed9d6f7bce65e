"""Could llama.cpp's own kernels be the target's forward? Its library (llama-cpp-python, optional) reads out the
inputs of chosen layers (`llama_set_embeddings_layer_inp`, the taps its EAGLE-3 support uses: what a drafter needs),
so the question is whether a verification's rows get what one-token steps give them: greedy speculation is
token-identical to plain decoding only if they do.

    PYTHONPATH=. python scripts/ggml_row_exact_probe.py [--flash-attn 0|1] [--trials 40]

Decodes random contexts of the default target's GGUF, then 2-8 new tokens one at a time and, after removing them,
all at once; counts the rows whose logits or tapped layer inputs differ, and times verifications of 1-8 rows."""

from __future__ import annotations

import argparse
import ctypes
import statistics
import time

import numpy as np


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--flash-attn", type=int, default=-1, help="-1: llama.cpp's choice, 0 off, 1 on")
    p.add_argument("--trials", type=int, default=40)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()

    import llama_cpp.llama_cpp as llama

    from playground.smollm2 import available_gguf

    lib = llama._lib
    # C++ symbols (llama-ext.h): void (llama_context *, uint32_t, bool) and float * (llama_context *, uint32_t)
    tap = lib._Z30llama_set_embeddings_layer_inpP13llama_contextjb
    tap.argtypes, tap.restype = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_bool], None
    tapped = lib._Z30llama_get_embeddings_layer_inpP13llama_contextj
    tapped.argtypes, tapped.restype = [ctypes.c_void_p, ctypes.c_uint32], ctypes.POINTER(ctypes.c_float)

    llama.llama_backend_init()
    model = llama.llama_model_load_from_file(str(available_gguf()).encode(), llama.llama_model_default_params())
    params = llama.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch = 2048, 512, 512
    params.n_threads = params.n_threads_batch = args.threads
    params.flash_attn_type, params.no_perf = args.flash_attn, True
    ctx = llama.llama_init_from_model(model, params)
    vocab = llama.llama_vocab_n_tokens(llama.llama_model_get_vocab(model))
    width, layers = llama.llama_model_n_embd(model), llama.llama_model_n_layer(model)
    aux = [2, layers // 2, layers - 3]
    for layer in aux:
        tap(ctx, layer, True)
    memory = llama.llama_get_memory(ctx)
    batch = llama.llama_batch_init(512, 0, 1)

    def decode(tokens: list[int], start: int) -> tuple[np.ndarray, list[np.ndarray]]:
        batch.n_tokens = len(tokens)
        for i, token in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, start + i, 1, 1
            batch.seq_id[i][0] = 0
        if llama.llama_decode(ctx, batch) != 0:
            raise SystemExit("llama_decode failed")
        logits = np.ctypeslib.as_array(llama.llama_get_logits(ctx), shape=(len(tokens), vocab)).copy()
        states = [np.ctypeslib.as_array(tapped(ctx, layer), shape=(len(tokens), width)).copy() for layer in aux]
        return logits, states

    rng = np.random.default_rng(0)
    rows = differ = 0
    for _ in range(args.trials):
        llama.llama_memory_clear(memory, True)
        context = rng.integers(100, 40000, int(rng.integers(5, 500))).tolist()
        decode(context, 0)
        new = rng.integers(100, 40000, int(rng.integers(2, 9))).tolist()
        alone = [decode([token], len(context) + i) for i, token in enumerate(new)]
        llama.llama_memory_seq_rm(memory, 0, len(context), -1)
        logits, states = decode(new, len(context))
        for i, (one_logits, one_states) in enumerate(alone):
            rows += 1
            same = np.array_equal(one_logits[0], logits[i]) and all(
                np.array_equal(one[0], many[i]) for one, many in zip(one_states, states))
            differ += not same
    print(f"flash attention {args.flash_attn}: {differ} of {rows} verified rows differ from one-token steps")

    llama.llama_memory_clear(memory, True)
    decode(list(range(100, 300)), 0)
    for count in (1, 2, 3, 4, 5, 8):
        seconds = []
        for _ in range(30):
            llama.llama_memory_seq_rm(memory, 0, 200, -1)
            started = time.perf_counter()
            decode(list(range(500, 500 + count)), 200)
            seconds.append(time.perf_counter() - started)
        print(f"{count} rows after 200 tokens: {statistics.median(seconds) * 1e3:.2f} ms (median of 30)")


if __name__ == "__main__":
    main()
