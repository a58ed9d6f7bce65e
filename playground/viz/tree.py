"""One step's draft tree as HTML: every verified node under its parent, with its token, depth colour and the
drafter's probability, and the accepted path marked. Read from a StepEvent's tree fields (engine/tree.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from playground.engine import StepEvent

from .provenance import depth_colour, escape_html


@dataclass(frozen=True)
class TreeStep:
    """A step's tree with its tokens' text, taken once when the step arrives (drawing it needs no tokenizer)."""

    step: int
    texts: list[str]  # each node's token as text
    parents: list[int]  # index of each node's parent; -1 = the root (the last emitted token)
    depths: list[int]
    probs: list[float]
    path: list[int]  # the accepted nodes, shallowest first
    bonus: str  # the target's own token after the path

    @classmethod
    def of(cls, event: StepEvent, decode: Callable[[list[int]], str]) -> TreeStep | None:
        """The tree of a step that drafted one, else None."""
        if not event.tree_tokens:
            return None
        return cls(event.step, [decode([t]) for t in event.tree_tokens], list(event.tree_parents or []),
                   list(event.tree_depths or []), list(event.tree_probs or []), list(event.tree_path or []),
                   decode(event.emitted[-1:]))


def _shown(text: str) -> str:
    """A token's text made visible: spaces and line breaks as marks, the rest escaped."""
    return escape_html(text).replace(" ", "␣").replace("\n", "⏎") or "∅"


def tree_html(tree: TreeStep, elem_id: str = "tree-view") -> str:
    """The tree as nested lists (a child under its parent, siblings in the drafter's order), the accepted path in
    bold with a green edge; the caption says how many nodes were verified and how many were accepted."""
    children: dict[int, list[int]] = {}
    for node, parent in enumerate(tree.parents):
        children.setdefault(parent, []).append(node)
    on_path = set(tree.path)

    def branch(parent: int) -> str:
        items = []
        for node in children.get(parent, []):
            accepted = node in on_path
            style = (f"border-left:4px solid {depth_colour(tree.depths[node])};padding-left:4px;"
                     + ("font-weight:700;background:rgba(46,160,67,0.18);" if accepted else "opacity:0.8;"))
            label = (f'<span class="tree-node{" tree-accepted" if accepted else ""}" style="{style}" '
                     f'title="depth {tree.depths[node]}, draft probability {tree.probs[node]:.2f}'
                     f'{", accepted" if accepted else ""}"><code>{_shown(tree.texts[node])}</code> '
                     f'<small>{tree.probs[node]:.0%}</small></span>')
            items.append(f"<li>{label}{branch(node)}</li>")
        return f'<ul class="tree-level">{"".join(items)}</ul>' if items else ""

    accepted = "".join(tree.texts[node] for node in tree.path)
    caption = (f"Step {tree.step}: {len(tree.texts)} drafted nodes verified in one forward, {len(tree.path)} accepted"
               f" (<b>{_shown(accepted)}</b>), then the target's own <code>{_shown(tree.bonus)}</code>. Tokens read "
               f"as text: ␣ a space, ⏎ a line break, ∅ a token without text (the end of the answer); the percentage "
               f"is the drafter's probability of a node given its parent.")
    return (f'<div id="{elem_id}" class="tree-view"><div class="tree-caption">{caption}</div>'
            f'<div class="tree-root">after the last emitted token{branch(-1)}</div></div>')


def tree_css() -> str:
    return TREE_CSS


TREE_CSS = """
.tree-view { font-size: 0.85em; margin-top: 0.5em; overflow-x: auto; }
.tree-view .tree-caption { margin-bottom: 0.3em; }
.tree-view ul.tree-level { list-style: none; margin: 0; padding-left: 1.1em; }
.tree-view li { margin: 1px 0; white-space: nowrap; }
"""
