"""Style shared by the run figures (figures.py) and the benchmark figures (bench.py)."""

from __future__ import annotations

from playground.drafting import METHODS

# the same method, the same colour, everywhere (keyed by label, as the figures name their lines)
VARIANT_COLORS = {method.label: method.colour for method in METHODS.values() if method.colour}


def two_lines(main: str, detail: str) -> str:
    """A title on two lines, the detail smaller: plotly titles do not wrap, and one long line is cut at phone width.
    Only where no legend sits on top of the plot (it would cover the second line)."""
    return f"{main}<br><span style='font-size:11px'>{detail}</span>"
