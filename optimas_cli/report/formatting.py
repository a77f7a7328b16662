"""A report table: display cells for Markdown/rich (with bold marks) and exact values for CSV."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field


@dataclass
class Table:
    name: str                      # file stem: table2 -> table2.csv
    title: str
    headers: list[str]
    rows: list[list[str]] = field(default_factory=list)
    bold: set[tuple[int, int]] = field(default_factory=set)   # (row, column) cells to emphasize
    left: int = 1                  # leading text columns, aligned left; the numbers align right
    footnote: str = ""
    summary: str = ""              # a verdict line shown under the table, above the footnote
    csv_headers: list[str] = field(default_factory=list)
    csv_rows: list[list] = field(default_factory=list)        # unrounded values, one row per group
    runs: list = field(default_factory=list)   # the runs its rows pool: a note says when their code differs


@dataclass
class Summary:
    """Several runs' values of one number: one run keeps its own mean ± std (over its test repeats);
    several runs give the mean ± std (population) of their means."""

    mean: float
    std: float
    count: int

    @classmethod
    def of(cls, means: list[float], single_std: float | None = None) -> Summary:
        if len(means) == 1:
            return cls(means[0], single_std if single_std is not None else 0.0, 1)
        return cls(statistics.fmean(means), statistics.pstdev(means), len(means))


def number(x: float | int | None, digits: int = 4) -> str:
    """Fixed decimals, trailing zeros kept so a column lines up; None is an em dash."""
    if x is None:
        return "—"
    return f"{x:.{digits}f}"


def compact(x: float | int) -> str:
    """16.0 -> '16', 12.3333 -> '12.3333' (ledger values are already rounded to 4 decimals)."""
    text = f"{float(x):,.4f}".rstrip("0").rstrip(".")
    return text


def percent(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.2f}%"


def with_count(text: str, count: int) -> str:
    return text if count == 1 else f"{text} (×{count})"
