"""The session pooling of the health check (health/check.py `pooled`) on the runs scripts/health_check.py measured:
each case's five live answers (k = 4) taken as one session in order, each finished answer held with the earlier ones
under the same leading difference, from the counts committed in assets/health/<preset>.json (no model runs).

    PYTHONPATH=. python scripts/health_pooled.py --preset smollm2-135m

Cases without a difference (ordinary greedy and T = 0.7 answers) are never pooled: it prints them as they were.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from playground.health import Health
from playground.health.check import pooled
from playground.health.facts import fingerprint_for
from playground.presets import get_preset

ROOT = Path(__file__).resolve().parents[1]
K = 4  # the cases' live runs
DIFFERENCE = {"llama3 template": "template", "perturbed target (0.25 sd)": "weights"}  # their leading difference


def session(runs: list[dict], model, difference: str | None) -> list[str]:
    """Each run's verdict: its own, or the pooled one ("F*": flagged with the earlier answers)."""
    earlier, out = [], []
    for run in runs:
        if run.get("rate") is None or run["status"] not in ("in range", "flagged"):
            out.append("—")
            continue
        known = [difference] if difference else []
        own = Health(run["status"], run["steps"], run["rate"], tuple(run["expected"]), differences=known,
                     causes=known if run["status"] == "flagged" else [])
        health = pooled(own, model, earlier) if own.status == "in range" else own
        out.append(f"{run['rate']:.2f}" + ("" if not health.flagged else " F" if own.flagged else " F*"))
        earlier.append(health)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="smollm2-135m")
    args = parser.parse_args()
    measured = json.loads((ROOT / "assets" / "health" / f"{args.preset}.json").read_text())
    preset = get_preset(args.preset)
    for drafter, cases in measured["cases"].items():
        fingerprint = fingerprint_for(preset, drafter)
        for case, runs in cases.items():
            model = fingerprint.section(0.7 if case.startswith("T=") else 0.0).depth_one(K)
            difference = DIFFERENCE.get(case) or ("context" if case.startswith("long") else None)
            print(f"{drafter:9} {case:28} {'  '.join(session(runs, model, difference))}")


if __name__ == "__main__":
    main()
