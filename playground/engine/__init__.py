"""The speculative-decoding engine: target wrapper, EAGLE-3/3.1 drafter, weightless proposers (prompt lookup, suffix
decoding), decode loops, step events."""

from playground.drafting import MAX_K

from .checkpoint import CheckpointError, load_drafter, save_drafter
from .config import GenerationConfig
from .decode import plain_generate, speculative_generate
from .drafter import DrafterConfig, Eagle3Drafter
from .probe import PlainProbe
from .record import RunRecord
from .target import Target, TargetError
from .trace import AttentionMass, Baseline, RunMetrics, RunTally, SpecCounters, StepEvent, emitted_ids, summarize
from .tree import tree_generate
from .tree_shape import TreeShape
from .weightless import weightless_generate

__all__ = [
    "MAX_K", "AttentionMass", "Baseline", "CheckpointError", "DrafterConfig", "Eagle3Drafter", "GenerationConfig",
    "PlainProbe", "RunMetrics", "RunRecord", "RunTally", "SpecCounters", "StepEvent", "Target",
    "TargetError", "TreeShape", "emitted_ids",
    "load_drafter", "plain_generate", "save_drafter", "speculative_generate", "summarize", "tree_generate",
    "weightless_generate",
]
