"""The synthetic report's brackets of the local reward, by regret and by what each paid, and the LRF's accuracy
against the pairs it was trained on.

Brackets mix signal with cost: the oracle pays no Stage 1, random reward none either (so it gets more loop runs),
learned Optimas pays its Stage 1 collection. The paid table reads anytime curves (regret.py) at the runs learned
Optimas paid in the same cell and seed, so each bracket is also seen at the same spend.
"""
from __future__ import annotations

import hashlib
import json
import statistics
from collections.abc import Iterable, Mapping, Sequence

from optimas_cli.report.regret import regret_at
from optimas_cli.report.synthetic_grid import (
    EXACT_LABELS,
    LEARNED,
    ORACLE,
    RANDOM,
    Grid,
    best_global,
    mean_of,
)
from optimas_cli.report.synthetic_verdict import fmt
from optimas_cli.stats import seed_interval

BRACKETS = (ORACLE, LEARNED, "optimas_paper", "optimas_no_adapt", RANDOM)
PAIR_BINS = ((0, 20), (20, 40), (40, 80), (80, 10 ** 9))


def with_interval(values: Sequence[float]) -> str:
    ci = seed_interval(values)
    return f"{statistics.fmean(values):.3f}" + ("" if ci is None else f" [{ci.low:.3f}, {ci.high:.3f}]")


def bracket_table(grid: Grid, reg) -> list[str]:
    """Per cell: mean regret of the oracle, learned Optimas three ways, random reward, the best global search."""
    lines = ["| cell | " + " | ".join(BRACKETS) + " | best global search |", "|---|" + "---|" * (len(BRACKETS) + 1)]
    for cell in grid.cells:
        if not any((cell.name, m) in reg for m in grid.methods):
            continue
        best = best_global(reg, cell)
        lines.append(f"| {cell.name} | " + " | ".join(fmt(mean_of(reg, cell, m)) for m in BRACKETS)
                     + f" | {'-' if best is None else f'{best} {mean_of(reg, cell, best):.3f}'} |")
    return lines


def stage1_runs(row: Mapping) -> float:
    """The executed runs of a run's Stage 1 (its collection and LRF training)."""
    return row["collection"] + row["LRF training"]


def loop_runs(row: Mapping) -> float:
    """The executed runs of a run's loop: all its optimization runs but Stage 1's and Stage 2's (adaptation)."""
    return round(row["executed_runs"] - stage1_runs(row) - row["adaptation"], 4)  # optimization_runs' precision


def charged_at(learned: Mapping, cap: float | None = None) -> float:
    """Where the charged oracle is read: the cap (`cap`, else learned Optimas' own) minus its Stage 1 runs."""
    return (learned["cap"] if cap is None else cap) - stage1_runs(learned)


def charged_oracle(oracle: Mapping, learned: Mapping, cap: float | None = None) -> float:
    """The oracle's regret on its anytime curve at the cap minus the Stage 1 runs learned Optimas paid (same cell and
    seed): the oracle as if it had paid that Stage 1. `cap`: a reading other than learned Optimas' own cap."""
    return regret_at(oracle["curve"], charged_at(learned, cap), oracle["optimum"] - oracle["initial"])


def matched_random(random: Mapping, learned: Mapping) -> float:
    """Random reward's regret on its anytime curve at the runs learned Optimas spent in its loop (same cell and
    seed): the same loop spend, neither paying a Stage 1 or a Stage 2."""
    return regret_at(random["curve"], loop_runs(learned), random["optimum"] - random["initial"])


def mean_runs(values: Sequence[float]) -> str:
    return f"{round(statistics.fmean(values))}" if values else "-"


def spent(runs: Sequence[Mapping]) -> tuple[str, str, str]:
    """Mean executed runs of Stage 1, Stage 2 and the loop over `runs`."""
    return tuple(mean_runs([f(r) for r in runs]) for f in (stage1_runs, lambda r: r["adaptation"], loop_runs))


def paid_brackets(grid: Grid) -> list[str]:
    """Per cell, each bracket's regret beside the executed runs it paid (the table's own preface says which)."""
    of = {(r["cell"], r["method"], r["seed"]): r for r in grid.rows}
    lines = ["Each bracket's regret (mean over seeds, seed-level 95% interval) beside what it paid: mean executed "
             "runs of Stage 1 (collection and LRF training), Stage 2 (adaptation) and the loop. Learned Optimas is "
             f"`{LEARNED}`. The free oracle pays no Stage 1. The charged oracle is the oracle's anytime curve read at the "
             "cap minus the Stage 1 runs learned Optimas paid in the same cell and seed, as if the oracle had paid them "
             "(charged, not run). Random reward has no Stage 1; at matched loop spend its curve is read at the executed "
             "runs learned Optimas spent in its loop (its optimization runs minus its Stage 1 and Stage 2) in the same "
             "cell and seed. A reading takes the configuration reached by then (`lrf` routers at their final picks, as "
             f"in the anytime table). The exact-label LRF (`{EXACT_LABELS}`, off the committed grid: "
             f"`experiment/synthetic_method={EXACT_LABELS}`) collects the same pairs at the same cost as "
             "learned Optimas, each ordered by the exact expected reward of its candidates.", "",
             "| cell | bracket | seeds | regret [95% CI] | Stage 1 runs | Stage 2 runs | loop runs |",
             "|---|---|---|---|---|---|---|"]
    for cell in grid.cells:
        got = {m: [of[k] for s in grid.seeds(cell) if (k := (cell.name, m, s)) in of]
               for m in (LEARNED, ORACLE, EXACT_LABELS, RANDOM)}
        if not any(got.values()):
            continue
        learned = {r["seed"]: r for r in got[LEARNED]}
        charged = [(o, learned[o["seed"]]) for o in got[ORACLE] if o["seed"] in learned]
        matched = [(r, learned[r["seed"]]) for r in got[RANDOM] if r["seed"] in learned]
        brackets = [
            ("learned Optimas", [r["regret"] for r in got[LEARNED]], spent(got[LEARNED])),
            ("oracle, free", [r["regret"] for r in got[ORACLE]], spent(got[ORACLE])),
            ("oracle, charged Optimas' Stage 1", [charged_oracle(o, lr) for o, lr in charged],
             (f"{mean_runs([stage1_runs(lr) for _, lr in charged])} charged", "0",
              f"read at {mean_runs([charged_at(lr) for _, lr in charged])}")),
            ("exact-label LRF", [r["regret"] for r in got[EXACT_LABELS]], spent(got[EXACT_LABELS])),
            ("random reward, full cap", [r["regret"] for r in got[RANDOM]], spent(got[RANDOM])),
            ("random reward, matched loop spend", [matched_random(r, lr) for r, lr in matched],
             ("0", "0", f"read at {mean_runs([loop_runs(lr) for _, lr in matched])}")),
        ]
        for name, regrets, paid in brackets:
            measured = f"{with_interval(regrets)} | " + " | ".join(paid) if regrets else "not run | - | - | -"
            lines.append(f"| {cell.name} | {name} | {len(regrets)} | {measured} |")
    return lines


def stage1_key(results: Mapping) -> str:
    """What determines a run's Stage 1 (its simulator, seed, reward model and training split): runs of one cell
    and seed that differ only after Stage 1 (optimas, optimas_paper, optimas_no_adapt) share it."""
    config = results["config"]
    what = {"pipeline": config["pipeline"], "seed": config["seed"], "lrf": config["lrf"],
            "train_size": config["budget"]["train_size"], "proposer": config.get("proposer")}
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()


def lrf_by_pairs(results: Iterable[Mapping]) -> list[str]:
    """Per component of every distinct Stage 1 (counted once however many runs share it): the pairs collected
    for it against its r_k's accuracy on its held-out test pairs (fewer than lrf.min_test_pairs: no test split)."""
    points, seen = [], set()
    for r in results:
        components = (r.get("lrf") or {}).get("components") or {}
        key = stage1_key(r)
        if not components or key in seen:
            continue
        seen.add(key)
        kinds = r["pipeline_info"]["kinds"]
        for name, c in components.items():
            if c.get("pairwise_accuracy") is not None:
                points.append((c["pairs"]["collected"], c["pairwise_accuracy"], kinds[name], c["n_pairs"]))
    lines = [f"{len(seen)} distinct Stage 1 runs.", "",
             "| pairs collected for the component | components | by kind | mean test accuracy | test pairs |",
             "|---|---|---|---|---|"]
    for lo, hi in PAIR_BINS:
        got = [p for p in points if lo <= p[0] < hi]
        if got:
            kinds = {k: sum(p[2] == k for p in got) for k in ("prompt", "choice", "route")}
            lines.append(f"| {lo}–{hi if hi < 10 ** 9 else '…'} | {len(got)} | "
                         + ", ".join(f"{k} {n}" for k, n in kinds.items() if n)
                         + f" | {statistics.fmean(p[1] for p in got):.3f} | {sum(p[3] for p in got)} |")
    return lines
