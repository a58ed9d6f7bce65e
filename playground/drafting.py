"""What a run may ask of drafting, in one set of words for every entry point (the engine, presets, the UI and its API,
the CLI, the server and the bench): the name of plain decoding and the range of k.

A module of its own with no imports, so that presets and the UI check a request without loading torch."""

PLAIN = "none"  # the drafter name that means plain decoding, as the CLI, the API and the server take it
MAX_K = 16


def k_problem(k: object) -> str | None:
    """Why `k` cannot be a number of speculative tokens per step, in one line; None when it can."""
    if isinstance(k, bool) or not isinstance(k, int):
        return f"k (speculative tokens per step) must be a whole number, got {k!r}"
    if not 1 <= k <= MAX_K:
        return f"k (speculative tokens per step) must be between 1 and {MAX_K}, got {k}"
    return None
