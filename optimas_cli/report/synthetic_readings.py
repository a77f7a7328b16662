"""The second phase map's readings (issue 59): each run's regret on its anytime curve at 1/2x, 1x and 2x of its
cell's cap of 90 K executed runs, the share of its initial regret closed by then, and whether it had left its
initial configuration by then. A method none of whose runs in a cell had moved by a reading "did not move" there:
printed so, never ranked."""
from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from optimas_cli.report.regret import moved_by
from optimas_cli.report.synthetic_brackets import with_interval
from optimas_cli.report.synthetic_grid import Cell, Grid, regret_at_share, runs_at

READINGS = (0.5, 1.0, 2.0)  # shares of the cap the committed rule reads each run at
AT_CAP = 1.0  # the verdict's reading
DID_NOT_MOVE = "did not move"
NAMES = {0.5: "½x", 1.0: "1x", 2.0: "2x"}


@dataclass
class Reading:
    """One method in one cell at one reading: per seed, its regret and the share of its initial regret closed."""
    regret: dict[int, float] = field(default_factory=dict)
    closed: dict[int, float] = field(default_factory=dict)
    moved: bool = False  # some seed had left its initial configuration by the reading

    def add(self, seed: int, regret: float, initial: float, moved: bool) -> None:
        self.regret[seed] = regret
        self.closed[seed] = (initial - regret) / initial if initial > 0 else 0.0  # nothing to close: none closed
        self.moved |= moved

    @property
    def mean(self) -> float:
        return statistics.fmean(self.regret.values())

    def shown(self, interval: bool = False) -> str:
        """Its mean regret (with the seed-level 95% interval), or "did not move"."""
        if not self.moved:
            return DID_NOT_MOVE
        return with_interval(list(self.regret.values())) if interval else f"{self.mean:.3f}"


Readings = dict[tuple[str, str], Reading]  # (cell name, method) -> its reading


def history(row: Mapping) -> list:
    return (row.get("results") or {}).get("history") or []


def read(grid: Grid, share: float) -> Readings:
    """Every (cell, method) of the grid read at `share` of its cell's reference cap."""
    cells = {c.name: c for c in grid.cells}
    out: Readings = {}
    for r in grid.rows:
        cell = cells[r["cell"]]
        out.setdefault((cell.name, r["method"]), Reading()).add(
            r["seed"], regret_at_share(r, cell, share), r["optimum"] - r["initial"],
            moved_by(history(r), runs_at(r, cell, share)))
    return out


def readings_table(grid: Grid, cells: Sequence[Cell], methods: Sequence[str]) -> list[str]:
    """Per cell and method: regret at each reading, and the share of the initial regret closed at 1x."""
    at = {share: read(grid, share) for share in READINGS}
    lines = ["Regret read on each run's anytime curve at ½x, 1x and 2x of its cell's cap (90 K executed runs; runs "
             "are capped at 2x), mean over seeds with the seed-level 95% interval, and the share of the initial regret "
             f"closed at 1x (mean over seeds). \"{DID_NOT_MOVE}\": none of the method's runs in the cell had left its "
             "initial configuration by then; it is not ranked. The verdict reads 1x.", "",
             "| cell | cap (1x) | method | seeds | " + " | ".join(NAMES[s] for s in READINGS) + " | closed at 1x |",
             "|---|---|---|---|" + "---|" * (len(READINGS) + 1)]
    for cell in cells:
        for m in methods:
            if (cell.name, m) not in at[AT_CAP]:
                continue
            got = [at[s][(cell.name, m)] for s in READINGS]
            cap = at[AT_CAP][(cell.name, m)]
            closed = f"{statistics.fmean(cap.closed.values()):.0%}" if cap.moved else DID_NOT_MOVE
            lines.append(f"| {cell.name} | {cell.reference_cap:g} | {m} | {len(cap.regret)} | "
                         + " | ".join(g.shown(interval=True) for g in got) + f" | {closed} |")
    return lines
