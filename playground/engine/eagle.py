"""An EAGLE-3 / EAGLE-3.1 drafter's proposer (the registry's entry for both names this module): a chain of k drafts a
step (`decode.ChainDrafter`), or a draft tree where the run asks one (`tree.TreeDrafting`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .decode import ChainDrafter
from .tree import TreeDrafting, tree_problem

if TYPE_CHECKING:
    from .loop import Speculator
    from .proposers import ProposerRun


def build_speculator(run: ProposerRun) -> Speculator:
    if run.cfg.tree is None:
        return ChainDrafter(run.drafter, run.cfg, run.target, run.generator, run.aux_layers)
    problem = tree_problem(run.cfg, run.cfg.tree)
    if problem:
        raise ValueError(problem)
    return TreeDrafting(run.drafter, run.cfg, run.cfg.tree, run.target, run.aux_layers, run.generator)
