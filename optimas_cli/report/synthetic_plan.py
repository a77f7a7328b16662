"""The second phase map's plan (issue 59) as its committed sweeps compose it (conf/experiment/synthetic_phase_map_2*.yaml,
the one place it is written): its cells with their seeds, its methods, its headline cell, and the order its cells
run in when a working day cannot hold them all (docs/synthetic.md: the headline cell; the 4-option cells; the
32-option cells; the control; the 128-option cells), so the report can say which cells ran and which are missing."""
from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from optimas_cli.report.synthetic_grid import Cell, Grid

SWEEPS = ("synthetic_phase_map_2", "synthetic_phase_map_2_control", "synthetic_phase_map_2_headline")
HEADLINE_SWEEP = "synthetic_phase_map_2_headline"  # its one cell is the headline cell
# docs/synthetic.md's order after the headline cell, by (options, interaction): the 4-option cells, the 32-option
# cells, the control (interaction none at 4 options), the 128-option cells
RUN_ORDER = ((4, "on"), (32, "on"), (4, "none"), (128, "on"))
CELL_AXES = ("pipeline.options", "experiment/synthetic_k", "pipeline.interaction", "pipeline.metric")


@dataclass(frozen=True)
class Plan:
    cells: tuple[Cell, ...]                # in the committed run order, the headline first
    seeds: Mapping[str, tuple[int, ...]]   # cell name -> its seeds
    methods: tuple[str, ...]               # run_labels, as the sweep lists them
    headline: Cell

    def runs(self, cell: Cell) -> int:
        return len(self.seeds[cell.name]) * len(self.methods)


def run_order(cell: Cell, headline: Cell) -> tuple:
    group = (cell.options, cell.interaction)
    rank = 0 if cell == headline else 1 + (RUN_ORDER.index(group) if group in RUN_ORDER else len(RUN_ORDER))
    return rank, cell.k, cell.metric


@lru_cache(maxsize=1)
def committed_plan() -> Plan:
    """The plan as Hydra composes the three committed sweeps (hydra.sweeper.params; each K option once for its
    components and cap)."""
    from hydra import compose, initialize_config_dir

    from optimas_cli.conf import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        params = {sweep: {key: str(values).split(",") for key, values in
                          compose("config", overrides=[f"experiment={sweep}"], return_hydra_config=True)
                          .hydra.sweeper.params.items()} for sweep in SWEEPS}
        sizes = {}
        for k in sorted({k for p in params.values() for k in p["experiment/synthetic_k"]}):
            cfg = compose("config", overrides=[f"experiment={SWEEPS[0]}", f"experiment/synthetic_k={k}"])
            sizes[k] = (int(cfg.pipeline.components), int(cfg.budget.max_runs))
    return plan_of(params, sizes)


def plan_of(params: Mapping[str, Mapping[str, list[str]]], sizes: Mapping[str, tuple[int, int]]) -> Plan:
    """The plan from each sweep's params (key -> its values) and each K option's (components, cap)."""
    seeds: dict[Cell, set[int]] = {}
    by_sweep: dict[str, set[Cell]] = {}
    for sweep, p in params.items():
        for options, k, interaction, metric in itertools.product(*(p[axis] for axis in CELL_AXES)):
            components, cap = sizes[k]
            cell = Cell(int(options), components, interaction, metric, cap)
            seeds.setdefault(cell, set()).update(int(s) for s in p["seed"])
            by_sweep.setdefault(sweep, set()).add(cell)
    (headline,) = by_sweep[HEADLINE_SWEEP]
    cells = tuple(sorted(seeds, key=lambda c: run_order(c, headline)))
    methods = tuple(params[SWEEPS[0]]["experiment/synthetic_method"])
    return Plan(cells, {c.name: tuple(sorted(seeds[c])) for c in cells}, methods, headline)


def cells_run(grid: Grid, plan: Plan) -> list[str]:
    """Which of the plan's cells ran, in the committed order, and which are missing (a cell counts its planned
    seeds x methods)."""
    have = {(r["cell"], r["seed"], r["method"]) for r in grid.rows}
    counted = [(c, sum((c.name, s, m) in have for s in plan.seeds[c.name] for m in plan.methods)) for c in plan.cells]
    full = [c.name for c, n in counted if n == plan.runs(c)]
    partly = [f"{c.name} ({n} of {plan.runs(c)} runs)" for c, n in counted if 0 < n < plan.runs(c)]
    missing = [c.name for c, n in counted if n == 0]
    off = sorted({c.name for c in grid.cells} - {c.name for c in plan.cells})
    order = "the headline cell; the 4-option cells; the 32-option cells; the control; the 128-option cells"
    lines = [f"The plan: {len(plan.cells)} cells, {sum(map(plan.runs, plan.cells))} runs "
             f"(conf/experiment/synthetic_phase_map_2*.yaml), run in this order: {order}. "
             f"{sum(n for _, n in counted)} of its runs are here.", "",
             f"- Ran: {', '.join(full) or 'none'}.",
             f"- Partly run: {', '.join(partly) or 'none'}.",
             f"- Not run: {', '.join(missing) or 'none'}."]
    return lines + ([f"- Off the plan (in the tables, not in the verdict): {', '.join(off)}."] if off else [])
