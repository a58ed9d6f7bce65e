"""What the Benchmark tab and its `/bench` API run on a public host (a Space, or PLAYGROUND_PUBLIC=1).

A bench holds the model while it runs, and every other visitor's chat waits behind it: the drift profile took 12
minutes. So a public host runs only the profiles measured to finish within a bound its owner sets
(PLAYGROUND_PUBLIC_BENCH_S, seconds; DEFAULT_BOUND_S unless set), judged from assets/bench/durations.json alone.
A duration counts only where it was measured on this kind of machine (the same CPU model, core count and vector units)
and on the preset asked for: measured elsewhere, or not at all, a profile counts as over the bound ("not measured
here"), since no honest factor turns one machine's minutes into another's. Off a public host every profile runs.

The tab exposes no custom sweep (its inputs are the profile, the preset and the adaptive-drafting threshold, which
only ends chains earlier), so the profiles' fixed prompts x k values x tokens are the whole of a visitor's work.
"""

from __future__ import annotations

import logging
import os
import platform
from dataclasses import dataclass
from pathlib import Path

from playground import environment
from playground.bench.profiles import DURATIONS, MeasuredDuration, app_profiles, measured_durations
from playground.bench.progress import format_duration
from playground.blas import first_processor

BOUND_ENV = "PLAYGROUND_PUBLIC_BENCH_S"
# The smoke profile (made for this tab) took ~3 min on a busy 2-core AMD EPYC, and a visitor's chat would wait that
# long behind it at most; the 12-minute drift study stays a command-line run.
DEFAULT_BOUND_S = 240.0

log = logging.getLogger(__name__)


class BenchRefused(ValueError):
    """A profile this public host does not run; the message says why in one line."""


@dataclass(frozen=True)
class Machine:
    """What a duration is comparable across: lscpu's model name, the core count, the widest vector units."""

    cpu: str
    cores: int
    simd: str

    def __str__(self) -> str:
        return f"{self.cores}-core {self.cpu} ({self.simd})"


def this_machine() -> Machine:
    """This machine, named as durations.json and a bench's results.json name theirs."""
    fields = first_processor()
    flags = set(fields.get("flags", "").split())
    simd = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    return Machine(fields.get("model name") or platform.processor() or "unknown", os.cpu_count() or 0, simd)


def bench_bound_s() -> float | None:
    """The public host's bound in seconds; None off a public host (no bound). A value that is not a positive number
    is logged and the default used: the owner's typo must not take the Space down or open it to the drift study."""
    if not environment.public_host():
        return None
    try:
        value = environment.number(BOUND_ENV, DEFAULT_BOUND_S)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        log.warning("%s=%r is not a positive number of seconds: using %g s", BOUND_ENV, environment.text(BOUND_ENV),
                    DEFAULT_BOUND_S)
        return DEFAULT_BOUND_S
    return value


@dataclass(frozen=True)
class Verdict:
    """Whether one profile runs here, on one preset, and why in a few words."""

    profile: str
    offered: bool
    why: str  # '3 min measured here' / '12 min measured here, over the bound' / 'not measured here: …'

    def __str__(self) -> str:
        return f"{self.profile} ({self.why})"


def judge(profile: str, preset: str, bound_s: float | None, measured: MeasuredDuration | None,
          machine: Machine) -> Verdict:
    """One profile against the bound (None: no bound, every profile runs)."""
    if bound_s is None:
        return Verdict(profile, True, "no bound off a public host")
    if measured is None:
        return Verdict(profile, False, "not measured")
    there = Machine(measured.cpu, measured.cores, measured.simd)
    if there != machine:
        return Verdict(profile, False, f"not measured here: {format_duration(measured.seconds)} on a {there}")
    if measured.preset != preset:
        return Verdict(profile, False, f"not measured on {preset}: {format_duration(measured.seconds)} on "
                                       f"{measured.preset}")
    took = f"{format_duration(measured.seconds)} measured here"
    if measured.seconds > bound_s:
        return Verdict(profile, False, f"{took}, over the bound")
    return Verdict(profile, True, took)


def verdicts(preset: str, durations: Path | None = None, machine: Machine | None = None) -> list[Verdict]:
    """Every profile's verdict for `preset` on this host, in the profiles' order (durations: DURATIONS by default,
    read at the call)."""
    bound, measured = bench_bound_s(), measured_durations(durations or DURATIONS)
    machine = machine or this_machine()
    return [judge(name, preset, bound, measured.get(name), machine) for name in app_profiles()]


def bound_text(bound_s: float) -> str:
    return f"{format_duration(bound_s)} ({BOUND_ENV}={bound_s:g})"


def check_offered(profile: str, preset: str, durations: Path | None = None, machine: Machine | None = None) -> None:
    """Raise BenchRefused (one line) where this public host does not run `profile` on `preset`; nothing off one or
    for a profile it offers. An unknown profile is left to the caller's own check."""
    bound = bench_bound_s()
    if bound is None or profile not in app_profiles():
        return
    table = verdicts(preset, durations, machine)
    verdict = next(v for v in table if v.profile == profile)
    if verdict.offered:
        return
    offered = [v.profile for v in table if v.offered]
    raise BenchRefused(
        f"this public host runs only bench profiles measured here to finish within {bound_text(bound)}, so that "
        f"other visitors do not wait behind them; {verdict}. "
        + (f"Offered on {preset}: {', '.join(offered)}." if offered else f"None is offered on {preset}."))


def public_note(preset: str, durations: Path | None = None, machine: Machine | None = None) -> str:
    """The tab's note on a public host (markdown): the bound, what is offered and what is not, and why; "" off one."""
    bound = bench_bound_s()
    if bound is None:
        return ""
    table = verdicts(preset, durations, machine)
    offered = [str(v) for v in table if v.offered]
    refused = [str(v) for v in table if not v.offered]
    lines = [f"**Public host.** A run holds the model and every visitor waits behind it, so this tab runs only "
             f"profiles measured on this machine, a {machine or this_machine()}, and on {preset} to finish within "
             f"{bound_text(bound)}. A profile measured elsewhere or not at all counts as over the bound."]
    lines.append(f"Offered: {', '.join(offered)}." if offered else "Offered: none.")
    if refused:
        lines.append(f"Not offered: {' · '.join(refused)}. Run them with `python -m playground bench --profile NAME` "
                     f"on a machine of your own.")
    return "  \n".join(lines)


def offered_profiles(preset: str, durations: Path | None = None, machine: Machine | None = None) -> list[str]:
    return [v.profile for v in verdicts(preset, durations, machine) if v.offered]
