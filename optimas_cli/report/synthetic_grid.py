"""The synthetic runs of a report as a grid: each run's cell (options x K x interaction, its metric and cap),
method (its run_label) and seed, with its regret and what it spent per phase.

The grid is read from the runs themselves: the sweep that made them (conf/experiment/synthetic_*.yaml) is the
one place it is written, so a slice, a new grid or the committed phase map all report the same way.
"""
from __future__ import annotations

import itertools
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from optimas_cli.errors import UserError
from optimas_cli.report.regret import measured, regret_at
from optimas_cli.report.runs import Run
from optimas_cli.system.budget import optimization_runs

# Display order of the methods the tables compare (a method not listed follows, by name): learned Optimas and
# its variants, the two brackets of the local reward, the global searches, the rest.
ORDER = ("optimas", "optimas_paper", "optimas_no_adapt", "optimas_oracle", "optimas_exact_labels", "random_reward",
         "coordinate_ascent", "global_reward", "tpe", "hbc")
GLOBAL_SEARCHES = ("coordinate_ascent", "global_reward", "tpe")
LEARNED, ORACLE, RANDOM, EXACT_LABELS = "optimas", "optimas_oracle", "random_reward", "optimas_exact_labels"
# A bracket, not a method, in the first phase map: the learned LRF with exact labels needs the simulator's exact
# reward. The brackets' table shows it; the method tables and the verdict compare the methods alone. The second
# map (every cell doubled) runs it as one of its methods.
BRACKET_ONLY = (EXACT_LABELS,)
CAP_PER_COMPONENT = 90  # the phase maps' cap: 90 K executed optimization runs per cell (docs/synthetic.md)
OVERSHOOT_SHARE = 0.05  # a run with fewer than two history entries: overshoot flagged above this share of the cap
# executed runs per phase (ledger.by_phase), in the loop's order; the rest but the final checks is "other"
PHASES = {"collection": ("lrf_collection", "reference_collection"), "LRF training": ("lrf_training",),
          "search sample": ("search_sample",), "local optimization": ("local_optimization",),
          "validation": ("validation",), "adaptation": ("adaptation",)}
FINAL_PHASES = ("test", "test_initial", "final_validation")  # not part of the optimization's runs
SIMULATOR = ("shape", "kinds", "input_types", "noise", "coupling", "marks")  # the settings every cell shares


@dataclass(frozen=True, order=True)
class Cell:
    options: int
    k: int
    interaction: str
    metric: str = "mean"
    cap: float = 0  # budget.max_runs (0: none)

    @property
    def name(self) -> str:
        return f"o{self.options}-K{self.k}-{self.interaction}" + ("" if self.metric == "mean" else f"-{self.metric}")

    @property
    def doubled(self) -> bool:
        """Run to twice the cell's cap of 90 K, as the second phase map runs (issue 59): read at 1/2x, 1x and 2x."""
        return self.cap == 2 * CAP_PER_COMPONENT * self.k

    @property
    def reference_cap(self) -> float:
        """The cap the readings of the anytime curve are shares of: 90 K for a doubled cell, else its own cap."""
        return CAP_PER_COMPONENT * self.k if self.doubled else self.cap


@dataclass
class Grid:
    rows: list[dict] = field(default_factory=list)
    cells: list[Cell] = field(default_factory=list)
    methods: list[str] = field(default_factory=list)  # the methods compared (bracket-only ones left out)
    problems: list[tuple[Path, str]] = field(default_factory=list)  # synthetic runs that could not be measured

    def seeds(self, cell: Cell) -> list[int]:
        return sorted({r["seed"] for r in self.rows if r["cell"] == cell.name})

    @property
    def doubled(self) -> bool:
        """Every cell run to twice its cap: the second phase map (issue 59), reported by its own rule."""
        return bool(self.cells) and all(c.doubled for c in self.cells)

    def planned(self) -> int:
        """Runs of the grid the rows span: each cell's seeds x the methods."""
        return sum(len(self.seeds(c)) for c in self.cells) * len(self.methods)

    def headline(self) -> Cell | None:
        """The hardest corner: the most options, the most components, interaction on, the mean metric."""
        return max(self.cells, key=lambda c: (c.options, c.k, c.interaction == "on", c.metric == "mean", c.cap),
                   default=None)

    def along_options(self, cell: Cell) -> list[Cell]:
        """The cells that differ from `cell` in options alone, fewest first."""
        return [c for c in self.cells if (c.k, c.interaction, c.metric, c.cap) == (cell.k, cell.interaction,
                                                                                     cell.metric, cell.cap)]

    def simulator(self) -> dict | None:
        """The simulator settings every run shares (None when they differ)."""
        seen = {tuple((k, r["settings"].get(k)) for k in SIMULATOR) for r in self.rows}
        return dict(next(iter(seen))) if len(seen) == 1 else None


def method_of(run: Run) -> str:
    """The method as the sweep named it: its run_label (conf/experiment/synthetic_method/), else a folder named
    after it (the committed phase map's <cell>/s<seed>/<method>), else the method's own name."""
    label = (run.results.get("config") or {}).get("run_label")
    if label:
        return str(label)
    return run.folder.name if re.fullmatch(r"[a-z][a-z0-9_]*", run.folder.name) else run.method


def cell_of(results: Mapping) -> Cell:
    config = results["config"]
    pipe = config["pipeline"]
    cap = float(config["budget"].get("max_runs") or 0)
    return Cell(int(pipe["options"]), int(pipe["components"]), str(pipe["interaction"]),
                str(pipe.get("metric", "mean")), int(cap) if cap.is_integer() else cap)


def one_step(history: Sequence[Mapping]) -> float | None:
    """The largest spend between two consecutive history entries (None with fewer than two)."""
    spent = [float(e["runs_so_far"]) for e in history]
    return max((b - a for a, b in itertools.pairwise(spent)), default=None)


def row_of(run: Run, cell: Cell) -> dict:
    results = run.results
    got = measured(run.folder, results)
    ledger, history = results["ledger"], results.get("history") or []
    executed = optimization_runs(ledger)
    cap = cell.cap or executed  # no cap: the run's own spend is its scale
    step = one_step(history)
    overshoot = executed - cap
    flagged = overshoot > (step if step is not None else OVERSHOOT_SHARE * cap)
    by_phase = ledger.get("by_phase") or {}
    named = {p for ps in PHASES.values() for p in ps}
    phases = {label: sum(float((by_phase.get(p) or {}).get("runs", 0.0)) for p in ps) for label, ps in PHASES.items()}
    phases["other"] = sum(float(v.get("runs", 0.0)) for p, v in by_phase.items() if p not in named and p not in FINAL_PHASES)
    return {"cell": cell.name, "options": cell.options, "K": cell.k, "interaction": cell.interaction,
            "seed": int(results["config"]["seed"]), "method": method_of(run), "regret": got["regret"],
            "reached": got["reached"], "optimum": got["optimum"], "initial": got["initial"],
            "executed_runs": executed, "cap": cap, "overshoot": round(overshoot, 2),
            "one_step": None if step is None else round(step, 2), "flagged": flagged,
            "stopped_by": results.get("stopped") or "its own end", "iterations": len(history),
            "accepted": sum(bool(e["accepted"]) for e in history), **phases, "curve": got["curve"],
            "settings": results["config"]["pipeline"], "results": results}


def grid_of(runs: Iterable[Run]) -> Grid | None:
    """The synthetic runs among `runs` as a grid; None when there are none."""
    synthetic = [r for r in runs if r.kind == "run" and r.pipeline == "synthetic"]
    if not synthetic:
        return None
    grid = Grid()
    cells: dict[str, Cell] = {}
    for run in synthetic:
        cell = cell_of(run.results)
        try:
            row = row_of(run, cell)
        except UserError as err:
            grid.problems.append((run.folder, err.problem))
            continue
        cells.setdefault(cell.name, cell)
        if cells[cell.name] != cell:
            grid.problems.append((run.folder, f"its cap {cell.cap:g} differs from its cell's other runs' "
                                              f"({cells[cell.name].cap:g}); left out"))
            continue
        grid.rows.append(row)
    grid.cells = sorted(cells.values())
    grid.methods = ordered({r["method"] for r in grid.rows} - set(() if grid.doubled else BRACKET_ONLY))
    return grid


def ordered(methods: Iterable[str]) -> list[str]:
    """`methods` in the tables' display order (ORDER, then any other by name)."""
    present = set(methods)
    return [m for m in ORDER if m in present] + sorted(present - set(ORDER))


def runs_at(row: Mapping, cell: Cell, share: float) -> float:
    """`share` of the cell's reference cap in executed runs (of the run's own spend where the cell has no cap)."""
    return share * (cell.reference_cap or row["cap"])


def regret_at_share(row: Mapping, cell: Cell, share: float) -> float:
    """The run's regret read on its anytime curve at `share` of its cell's reference cap."""
    return regret_at(row["curve"], runs_at(row, cell, share), row["optimum"] - row["initial"])


# -- regret per (cell, method, seed) ----------------------------------------------------------------------
Regrets = Mapping[tuple[str, str], Mapping[int, float]]  # (cell name, method) -> seed -> regret


def regrets_of(rows: Iterable[Mapping]) -> dict[tuple[str, str], dict[int, float]]:
    out: dict[tuple[str, str], dict[int, float]] = {}
    for r in rows:
        out.setdefault((r["cell"], r["method"]), {})[r["seed"]] = r["regret"]
    return out


def mean_of(reg: Regrets, cell: Cell, method: str) -> float | None:
    got = reg.get((cell.name, method))
    return statistics.fmean(got.values()) if got else None


def best_global(reg: Regrets, cell: Cell) -> str | None:
    """The global search (coordinate ascent, global reward, TPE) of lowest mean regret in `cell`."""
    means = {m: mean_of(reg, cell, m) for m in GLOBAL_SEARCHES}
    measured_ = {m: v for m, v in means.items() if v is not None}
    return min(measured_, key=measured_.get) if measured_ else None
