"""Table cells and counts shared by the sweep summary, the report and the console."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any


def tally(statuses: Iterable[str]) -> str:
    """How many of each status, by name: '2 completed, 1 diverged'."""
    return ", ".join(f"{n} {s}" for s, n in sorted(Counter(statuses).items()))


def cell(value: Any) -> str:
    """A table cell: floats to 4 significant digits, None empty, no stray column bars."""
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value).replace("|", "/")


def markdown_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)
