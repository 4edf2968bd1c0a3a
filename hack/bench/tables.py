"""Markdown tables and the number formats of the benchmark sections (pure)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

MISSING = "–"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub-flavoured table; None cells print as ``MISSING``; a column whose cells are all
    numbers (formatted or not, missing ones aside) aligns right."""
    cells = [[MISSING if c is None else str(c) for c in row] for row in rows]
    for row in cells:
        if len(row) != len(header):
            raise ValueError(f"row {row} has {len(row)} cells for {len(header)} columns")
    columns = [[c for c in column if c != MISSING] for column in zip(*cells, strict=True)]
    align = ["---:" if column and all(map(_numeric, column)) else "---"
             for column in columns or [[] for _ in header]]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in cells]
    return "\n".join(lines)


def _numeric(cell: str) -> bool:
    """A number, possibly with thousands separators, a unit suffix or a share in brackets
    (``1,234``, ``0.50×``, ``12%``, ``0.61 (55%)``)."""
    text = cell.split(" (")[0].rstrip("×%").replace(",", "")
    try:
        float(text)
    except ValueError:
        return False
    return True


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator``, None when either is missing or the denominator is 0."""
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def times(value: float | None) -> str:
    """A ratio as ``1.23×``."""
    return MISSING if value is None else f"{value:.2f}×"


def percent(value: float | None) -> str:
    return MISSING if value is None else f"{100 * value:.0f}%"


def seconds(value: float | None) -> str:
    if value is None:
        return MISSING
    return f"{value:.3f}" if value < 1 else f"{value:.2f}"


def rate(value: float | None) -> str:
    """Tokens per second, grouped by thousands."""
    return MISSING if value is None else f"{value:,.0f}"
