"""The kit's part that writes FINDINGS.md's tables: number and text cells, markdown tables, mean ± sd and
interval text. It imports no study; each study's ``*_findings`` module (and ``pendulum_tables``) builds its
generated blocks from these, and ``rebuild_docs`` writes them between FINDINGS.md's markers.
"""

from __future__ import annotations

import math

import numpy as np


def num(x, spec: str) -> str:
    """``x`` formatted with ``spec``, a true minus sign, and "—" when it is not a finite number."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return "—"
    return format(x, spec).replace("-", "−") if math.isfinite(x) else "—"


def text_cell(x) -> str:
    """A text cell of a table read back by ``results.read_table``: an empty cell reads as NaN, here ""."""
    return x if isinstance(x, str) else ""


def table(header: list[str], rows: list[list[str]]) -> str:
    """A markdown table ("|" in a cell escaped, a newline folded)."""
    def cell(text) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def mean_sd(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof 1; 0 for one value; NaN, NaN for none)."""
    v = np.asarray(values, float)
    if v.size == 0:
        return float("nan"), float("nan")
    return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0


def interval_text(r: dict, point: str = "point", spec: str = ".2f") -> str:
    """``r[point] [low, high]``: the bounds are ``low`` and ``high`` for the column ``point``, else named
    after the point (``difference`` -> ``difference_low``, ``difference_high``); a missing value is "—"."""
    low, high = ("low", "high") if point == "point" else (f"{point}_low", f"{point}_high")
    return f"{num(r.get(point), spec)} [{num(r.get(low), spec)}, {num(r.get(high), spec)}]"
