"""``python -m playground serve`` and ``vllm-command``: see `cli.py` for what is served and how it is split."""

from .cli import register

__all__ = ["register"]
