"""Run as a script by tests/engine/test_costs.py: the real default pair on every core (the tests' own process runs
on one thread), so the load reading meets what a step-cost profile meets: OpenMP helpers after products on two
threads. Prints one JSON object.

    python tests/support/load_check.py reads ROOT    # ten load readings, each at once after a verification forward
    python tests/support/load_check.py profile ROOT  # pair_profile under ROOT as k auto asks for it: its busy_share
"""

from __future__ import annotations

import json
import sys

import playground  # noqa: F401  (before torch: OpenMP's spin bound)
from playground.backends import open_backend
from playground.engine.cost_measure import pair_profile
from playground.engine.threads import other_runnable_tasks
from playground.presets import DEFAULT, get_preset


def main(what: str, root: str) -> dict:
    backend = open_backend(get_preset(DEFAULT))
    target = backend.target
    loaded = backend.drafter("eagle3.1")
    ids = target.tokenizer("Explain how Python list comprehensions work, and when a generator is better.")["input_ids"]
    if what == "reads":
        cache = target.new_cache()
        target.forward(ids[:-1], cache)
        values = []
        for _ in range(10):
            target.forward(ids[-1:] * 5, cache, loaded.aux_layers)  # a verification of five rows, on every thread
            cache.rollback(len(ids) - 1)
            values.append(other_runnable_tasks())
        return {"reads": values}
    profile = pair_profile(target, loaded.drafter, loaded.aux_layers, ("default", "eagle3.1"), list(ids), 64,
                           __import__("pathlib").Path(root))
    return {"busy_share": profile.busy_share, "measured_busy": profile.measured_busy, "plain_ms": profile.plain.ms}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])))
