"""Style shared by the run figures (figures.py) and the benchmark figures (bench.py)."""

from __future__ import annotations

VARIANT_COLORS = {"EAGLE-3": "#d62728", "EAGLE-3.1": "#1f77b4"}  # the same drafter, the same colour, everywhere


def two_lines(main: str, detail: str) -> str:
    """A title on two lines, the detail smaller: plotly titles do not wrap, and one long line is cut at phone width.
    Only where no legend sits on top of the plot (it would cover the second line)."""
    return f"{main}<br><span style='font-size:11px'>{detail}</span>"
