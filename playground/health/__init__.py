"""Drafter health: a drafter's fingerprint (fingerprint.py, measured by measure.py) and a run held against it
(check.py, with the run's facts gathered by facts.py)."""

from .check import Health, RunFacts, check_health, depth_counts, health_summary
from .facts import fingerprint_for, run_facts, run_health
from .fingerprint import Fingerprint, Section, fingerprint_path, load_fingerprint, weights_digest

__all__ = ["Fingerprint", "Health", "RunFacts", "Section", "check_health", "depth_counts", "fingerprint_for",
           "fingerprint_path", "health_summary", "load_fingerprint", "run_facts", "run_health", "weights_digest"]
