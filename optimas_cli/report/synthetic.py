"""The synthetic benchmark's section of `optimas report`: regret against the exact optimum per cell and method,
the verdict, regret at shares of the cap (the anytime curve), executed runs per phase, the brackets of the local
reward, and the phase map plot; with the rows and curves as CSV.

Written for a sweep of conf/experiment/synthetic_*.yaml (docs/synthetic.md), and for any synthetic runs.
"""
from __future__ import annotations

import csv
import json
import statistics
from collections.abc import Sequence
from pathlib import Path

from optimas_cli.report.runs import Run
from optimas_cli.report.synthetic_brackets import bracket_table, lrf_by_pairs, paid_brackets, with_interval
from optimas_cli.report.synthetic_grid import (
    LEARNED,
    OVERSHOOT_SHARE,
    PHASES,
    Grid,
    grid_of,
    mean_of,
    ordered,
    regret_at_share,
    regrets_of,
)
from optimas_cli.report.synthetic_plan import cells_run, committed_plan
from optimas_cli.report.synthetic_plot import plot_closed_share, plot_phase_map
from optimas_cli.report.synthetic_readings import readings_table
from optimas_cli.report.synthetic_verdict import against_global, fmt, verdict
from optimas_cli.report.synthetic_verdict_v2 import verdict as verdict_v2

SHARES = (0.1, 0.25, 0.5, 1.0)  # the anytime table's readings, as shares of the cap
DOUBLED_SHARES = (*SHARES, 2.0)  # the second phase map's runs go on to twice the cap
TITLE = "Synthetic benchmark: regret against the exact optimum"


def section(runs: Sequence[Run], out: Path) -> str | None:
    """The section's Markdown, with synthetic_runs.csv, synthetic_curves.csv and plots/phase_map.png written
    into `out`; None when no run is synthetic. The second phase map (every cell run to twice its cap) is judged
    by its own committed rule."""
    grid = grid_of(runs)
    if grid is None:
        return None
    write_tables(grid, out)
    path = out / "plots" / "phase_map.png"
    if grid.doubled:
        lines = report_lines(grid, second_map_lines(grid, path), DOUBLED_SHARES)
    else:
        lines = report_lines(grid, first_map_lines(grid, plot_phase_map(grid, path)))
    return "\n".join(lines) + "\n"


def grid_line(grid: Grid) -> str:
    """What the runs span: the cells' axes, the simulator, the seeds and cap per cell, the methods."""
    cells = grid.cells
    axes = [f"options {sorted({c.options for c in cells})}", f"K {sorted({c.k for c in cells})}",
            f"interaction {sorted({c.interaction for c in cells})}"]
    if {c.metric for c in cells} != {"mean"}:
        axes.append(f"metric {sorted({c.metric for c in cells})}")
    by_seeds: dict[tuple, list[str]] = {}
    for c in cells:
        by_seeds.setdefault(tuple(grid.seeds(c)), []).append(c.name)
    seeds = "; ".join(f"seeds {list(s)} in {', '.join(names) if len(names) < len(cells) else 'every cell'}"
                      for s, names in by_seeds.items())
    caps = ", ".join(sorted({f"{c.cap:g} at K {c.k}" for c in cells}))
    simulator = grid.simulator()
    return (f"Grid (read from the runs): {' x '.join(axes)}, simulator "
            f"{json.dumps(simulator) if simulator else 'settings differing between runs'}, instance = run seed; "
            f"{seeds}. Cap (budget.max_runs, executed optimization runs): {caps}. Methods, each a file of "
            f"conf/experiment/synthetic_method/ named by its run_label: {', '.join(grid.methods)}.")


def first_map_lines(grid: Grid, plot: Path | None) -> list[str]:
    """The first phase map's verdict (report/synthetic_verdict.py) and its map: per cell, the lowest mean regret
    and learned Optimas against the best global search."""
    reg = regrets_of(r for r in grid.rows if r["method"] in grid.methods)
    lines = ["### Verdict", "", *verdict(reg, grid), "", "### Phase map", ""]
    lines += [f"![phase map](plots/{plot.name})", ""] if plot else []
    lines += ["| cell | seeds | lowest mean regret | best global search | Optimas − best global search [95% CI] |",
              "|---|---|---|---|---|"]
    for cell in grid.cells:
        measured = {m: v for m in grid.methods if (v := mean_of(reg, cell, m)) is not None}
        if not measured:
            continue
        winner = min(measured, key=measured.get)
        best, diff = against_global(reg, cell, LEARNED)
        gap = "-" if diff is None else f"{diff.estimate:+.3f} [{diff.low:+.3f}, {diff.high:+.3f}]"
        seeds = {s for (c, _), by_seed in reg.items() if c == cell.name for s in by_seed}
        lines.append(f"| {cell.name} | {len(seeds)} | {winner} {measured[winner]:.3f} | {best or '-'} | {gap} |")
    return lines


def second_map_lines(grid: Grid, path: Path) -> list[str]:
    """The second phase map's (issue 59): which of its planned cells ran, the verdict by its committed rule
    (report/synthetic_verdict_v2.py), its figure (written to `path`) and its readings at ½x, 1x and 2x the cap."""
    plan = committed_plan()
    judged = verdict_v2(grid, plan)
    cells = [*plan.cells, *(c for c in grid.cells if c not in plan.cells)]
    methods = ordered({*plan.methods, *grid.methods})
    plot = plot_closed_share(grid, cells, methods, plan.headline, judged.summary, path)
    return ["### Cells run", "", *cells_run(grid, plan), "", "### Verdict", "", *judged.lines, "", "### Phase map", "",
            f"![phase map](plots/{plot.name})", "", *readings_table(grid, [c for c in cells if c in grid.cells], methods)]


def report_lines(grid: Grid, head: list[str], shares: Sequence[float] = SHARES) -> list[str]:
    """The section: what the runs span, then `head` (the verdict and the map), then the tables every grid has."""
    rows = [r for r in grid.rows if r["method"] in grid.methods]  # the method tables: the methods alone
    reg = regrets_of(rows)
    lines = [f"## {TITLE}", "", grid_line(grid), "",
             f"{len(rows)} of {grid.planned()} runs measured (each cell's seeds x the methods). Regret = optimum − "
             "reached expected test score (exact, over the run's test requests); mean over seeds with the seed-level "
             "95% interval (Student t; none for one seed).", ""]
    if grid.problems:
        lines += [f"Not measured: {', '.join(f'{folder} ({why})' for folder, why in grid.problems)}.", ""]
    lines += head
    groups = [(cell, m, got) for cell in grid.cells for m in grid.methods
              if (got := [r for r in rows if r["cell"] == cell.name and r["method"] == m])]
    lines += ["", "### Regret at the cap", "",
              "| cell | method | seeds | regret [95% CI] | executed runs (mean) | cap | most over the cap (runs − cap) | ended by |",
              "|---|---|---|---|---|---|---|---|"]
    for cell, m, got in groups:
        ended = sorted({str(r["stopped_by"]) for r in got})
        lines.append(f"| {cell.name} | {m} | {len(got)} | {with_interval([r['regret'] for r in got])} | "
                     f"{statistics.fmean(r['executed_runs'] for r in got):.0f} | {cell.cap or '-'} | "
                     f"{max(r['overshoot'] for r in got):+.1f} | {', '.join(ended)} |")
    flagged = [r for r in rows if r["flagged"]]
    lines += ["", "Runs over their cap by more than one step (the largest spend between two of their history entries; "
              f"with fewer than two entries, {OVERSHOOT_SHARE:.0%} of the cap): "
              + ("none." if not flagged else ", ".join(f"{r['cell']}/s{r['seed']}/{r['method']} (+{r['overshoot']:.1f}, "
                                                       f"step {fmt(r['one_step'], 1)})" for r in flagged))]
    lines += ["", "### Anytime regret", "", *anytime_table(groups, shares)]
    lines += ["", "### Executed runs per phase", "", "Mean over seeds (ledger.by_phase; collection: Stage 1's, or "
              "HBC's reference runs; other: the rest before the final validation and the test).", "",
              "| cell | method | " + " | ".join([*PHASES, "other"]) + " |", "|---|---|" + "---|" * (len(PHASES) + 1)]
    for cell, m, got in groups:
        lines.append(f"| {cell.name} | {m} | " + " | ".join(f"{statistics.fmean(r[p] for r in got):.0f}"
                                                            for p in [*PHASES, "other"]) + " |")
    lines += ["", "### Brackets", "", "Mean regret: the oracle LRF (upper bracket), learned Optimas three ways, "
              "random reward (lower bracket), and the best global search of the cell.", "", *bracket_table(grid, reg)]
    lines += ["", "### Brackets by what they paid", "", *paid_brackets(grid)]
    lines += ["", "### LRF test accuracy against the number of pairs", "", *lrf_by_pairs(r["results"] for r in rows)]
    return lines


def anytime_table(groups, shares: Sequence[float]) -> list[str]:
    """Mean regret per cell and method read on each run's anytime curve at `shares` of its cell's cap (a share
    above 1 reads a run capped higher than the cell's reference cap; a run ends where its history ends)."""
    heads = [f"{share:.0%}" for share in shares]
    lines = [f"Mean regret after {'/'.join(h.rstrip('%') for h in heads)}% of the cap, from each run's history "
             "(synthetic_curves.csv; Optimas-family `lrf` routers at their final picks).", "",
             "| cell | method | " + " | ".join(heads) + " |", "|---|---|" + "---|" * len(shares)]
    for cell, m, got in groups:
        cells = [statistics.fmean(regret_at_share(r, cell, share) for r in got) for share in shares]
        lines.append(f"| {cell.name} | {m} | " + " | ".join(f"{c:.3f}" for c in cells) + " |")
    return lines


def write_tables(grid: Grid, out: Path) -> None:
    """synthetic_runs.csv (a row per run) and synthetic_curves.csv (every run's anytime curve)."""
    out.mkdir(parents=True, exist_ok=True)
    columns = [c for c in (grid.rows[0] if grid.rows else {}) if c not in ("curve", "settings", "results")]
    with open(out / "synthetic_runs.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(grid.rows)
    with open(out / "synthetic_curves.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["cell", "seed", "method", "executed_runs", "regret"])
        for r in grid.rows:
            writer.writerows([r["cell"], r["seed"], r["method"], x, y] for x, y in r["curve"])
