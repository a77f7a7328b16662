"""The synthetic benchmark's phase map (issue 44): where, over options x K x interaction, Optimas' regret beats
global search's at one executed-runs cap per cell, and which bracket explains it where it does not.

Fixed and committed before any run that fills it (tests/test_synthetic_benchmark.py guards every constant):
the grid (CELLS: options 4, 32, 128 x K 10, 30 x interaction none, on; the other simulator settings as the
earlier benchmark's), the seeds (0-2 per cell, 0-4 in the headline cell: options 128, K 30, interaction on),
the methods (METHODS), the cap and the verdict's rule (`verdict`).

The cap: every method of a cell gets `budget.max_runs = 90 K` executed optimization runs (Table 3's count: the
final validation and the test left out) and an iteration limit that never binds (budget.iterations=100000,
which tpe's `trials` and every loop method's iterations follow; coordinate ascent has no limit but the cap
and its own convergence), so the cap, not a method's own count, ends a run. 90 K is the scale the earlier
benchmark's reference spent (optimas_no_adapt, 2K iterations, interaction none, 4 options: 908 runs at K = 10,
2,651 at K = 30), fixed per cell and independent of any method's spend. A run may cross its cap by at most
one step (caps.py); the report flags a run whose overshoot is larger than the largest spend between two of
its history entries (with fewer than two entries: over 5% of the cap).

Each run is an ordinary `optimas run` into <runs>/<cell>/s<seed>/<method>. When it ends, its regret and
anytime curve are measured from its test traces into regret.json and the folder is pruned to KEPT (small
files, relative paths); a folder holding results.json is finished and skipped, so the grid fills over
several sessions (--cells/--methods/--seeds pick a slice, --dry-run lists it; --methods also runs OFF_GRID's
methods, which the committed grid leaves out). --report-only rewrites the report blocks of
docs/results/synthetic/README.md (its hand-written parts stay), phase-map/runs.csv and curves.csv, and
phase_map.png.

Regret = the optimum's expected test score minus the reached configuration's, both exact
(optimas_pipelines/synthetic/exact.py): a router's `lrf` picks are read from the run's own test traces.
"""
from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import itertools
import json
import shutil
import statistics
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from optimas_cli.report.paper_tables import optimization_runs  # noqa: E402
from optimas_cli.stats import seed_interval  # noqa: E402
from optimas_cli.system import LRF_ROUTE  # noqa: E402
from optimas_pipelines.synthetic import exact  # noqa: E402
from optimas_pipelines.synthetic.system import build  # noqa: E402

# -- the grid, fixed before any run -----------------------------------------------------------------
SIMULATOR = {"shape": "chain", "kinds": "mix", "input_types": 3, "noise": 0.5, "coupling": 0.5, "marks": 8}
OPTIONS = (4, 32, 128)
KS = (10, 30)
INTERACTIONS = ("none", "on")
SEEDS = (0, 1, 2)
HEADLINE = (128, 30, "on")  # options, K, interaction
HEADLINE_SEEDS = (0, 1, 2, 3, 4)
COMMON = ["budget=synthetic", "proposer=pool", "repeats=1", "lrf.judge.enabled=false", "lrf.train_backbone=heads",
          "lrf.max_length=96", "lrf.score_traces=false"]
# lrf.score_traces=false (added after the first K=30 run, o4-K30-none s0 optimas, and all K=10 runs): per-step r_k
# in the traces is blame for `optimas show`, read by nothing here (regret comes from the test scores), and cost
# one LRF pass per traced step, 100-200 s of every learned Optimas run's test and test_initial
# the simulator reads no data: without OPTIMAS_DATA_DIR's folder, the committed run files name no machine path
NO_DATA = ["data_dir=null"]
ITERATIONS = 100000  # never binds: the cap ends every run
RUNS_PER_COMPONENT = 90
METHODS = {
    "optimas": ["method=optimas"],  # method.adaptation=lazy, its default
    "optimas_paper": ["method=optimas", "method.adaptation=paper"],
    "optimas_no_adapt": ["method=optimas_no_adapt"],
    "optimas_oracle": ["method=optimas", "lrf=oracle"],
    "random_reward": ["method=random_reward"],
    "coordinate_ascent": ["method=coordinate_ascent"],
    "global_reward": ["method=global_reward"],
    "tpe": ["method=tpe"],
    "hbc": ["method=hbc"],
}
# Runnable with --methods, never in the committed grid (a new grid is its own issue): the report's bracket table
# shows them where their runs exist. optimas_exact_labels: the same Stage 1 collection, each pair ordered by the
# exact expected reward (lrf/collect.py), so it separates the labels' noise from the LRF's generalization.
OFF_GRID = {"optimas_exact_labels": ["method=optimas", "lrf.collect.labels=exact"]}
RUNNABLE = {**METHODS, **OFF_GRID}
FILL = "python scripts/synthetic_benchmark.py"
GLOBAL_SEARCHES = ("coordinate_ascent", "global_reward", "tpe")
BRACKETS = ("optimas_oracle", "optimas", "optimas_paper", "optimas_no_adapt", "random_reward")
HALF = 0.5  # the headline: Optimas' regret at most half the best global search's
SHARES = (0.1, 0.25, 0.5, 1.0)  # the anytime curve's points, as shares of the cap
OVERSHOOT_SHARE = 0.05  # a run with fewer than two history entries: overshoot flagged above this share of the cap
KEPT = ("results.json", "best_config.json", "config.yaml", "regret.json")  # what a finished run folder keeps
# executed runs per phase (ledger.by_phase), in the loop's order; the rest but the final checks is "other"
PHASES = {"collection": ("lrf_collection", "reference_collection"), "LRF training": ("lrf_training",),
          "search sample": ("search_sample",), "local optimization": ("local_optimization",),
          "validation": ("validation",), "adaptation": ("adaptation",)}
FINAL_PHASES = ("test", "test_initial", "final_validation")  # not part of the optimization's runs


@dataclass(frozen=True)
class Cell:
    options: int
    k: int
    interaction: str

    @property
    def name(self) -> str:
        return f"o{self.options}-K{self.k}-{self.interaction}"

    @property
    def seeds(self) -> tuple[int, ...]:
        return HEADLINE_SEEDS if (self.options, self.k, self.interaction) == HEADLINE else SEEDS

    @property
    def cap(self) -> int:
        return cap(self.k)


CELLS = tuple(Cell(o, k, i) for o in OPTIONS for k in KS for i in INTERACTIONS)
HEADLINE_CELL = Cell(*HEADLINE)


def cap(k: int) -> int:
    """The executed optimization runs every method of a K-component cell may spend (module docstring)."""
    return RUNS_PER_COMPONENT * k


def overrides(cell: Cell, seed: int, method: str) -> list[str]:
    return ["pipeline=synthetic", f"pipeline.components={cell.k}", f"pipeline.options={cell.options}",
            f"pipeline.interaction={cell.interaction}", *[f"pipeline.{key}={value}" for key, value in SIMULATOR.items()],
            f"seed={seed}", *RUNNABLE[method], *COMMON, *NO_DATA, f"budget.iterations={ITERATIONS}", f"budget.max_runs={cell.cap}"]


def planned(cells: Sequence[Cell], seeds: Iterable[int] | None, methods: Sequence[str]) -> list[tuple[Cell, int, str]]:
    """The slice's runs: each cell's own seeds (those in `seeds`, when given) x methods."""
    wanted = None if seeds is None else set(seeds)
    return [(c, s, m) for c in cells for s in c.seeds if wanted is None or s in wanted for m in methods]


# -- running ---------------------------------------------------------------------------------------------
def run_folder(runs: Path, cell: Cell, seed: int, method: str) -> Path:
    return runs / cell.name / f"s{seed}" / method


def command(folder: Path, cell: Cell, seed: int, method: str) -> list[str]:
    return ["optimas", "run", *overrides(cell, seed, method), f"hydra.run.dir={folder}"]


def run_one(folder: Path, args: list[str]) -> None:
    """One `optimas run` into `folder` (relative to the repository root, so its files name no machine path),
    then measured and pruned; a folder holding results.json is only finished (measured, pruned) if need be."""
    if not (ROOT / folder / "results.json").exists():
        shutil.rmtree(ROOT / folder, ignore_errors=True)
        (ROOT / folder).parent.mkdir(parents=True, exist_ok=True)
        log = (ROOT / folder).parent / f"{folder.name}.log"
        print(" ".join(args), flush=True)
        with open(log, "w") as handle:
            done = subprocess.run([str(Path(sys.executable).with_name(args[0])), *args[1:]], cwd=ROOT,
                                  stdout=handle, stderr=subprocess.STDOUT)
        if done.returncode != 0 and not (ROOT / folder / "results.json").exists():  # 3: stopped by its cap
            sys.exit(f"error: {folder} failed ({done.returncode}): see {log.relative_to(ROOT)}; "
                     "fix it and rerun the same command (finished runs are skipped)")
        log.unlink()
    finish(ROOT / folder)


def finish(folder: Path) -> None:
    """regret.json from the run's test traces, then everything but KEPT removed."""
    if not (folder / "regret.json").exists():
        (folder / "regret.json").write_text(json.dumps(measure(folder)) + "\n")
    for path in folder.iterdir():
        if path.name not in KEPT:
            shutil.rmtree(path) if path.is_dir() else path.unlink()


# -- measuring one run --------------------------------------------------------------------------------
def test_steps(folder: Path) -> tuple[list[str], list[dict]]:
    """(example ids, each example's component steps) of the run's first test repeat."""
    ids, steps = [], []
    with gzip.open(folder / "predictions.jsonl.gz", "rt") as handle:
        for line in handle:
            record = json.loads(line)
            if record.get("split") == "test" and record.get("repeat", 0) == 0:
                ids.append(record["key"])
                steps.append(record["components"])
    return ids, steps


def apply(config: dict, entry: Mapping) -> None:
    """An accepted history entry's change: one component's value, or (tpe) {component: value} for several."""
    if isinstance(entry["component"], list):
        config.update(entry["proposal"])
    else:
        config[entry["component"]] = entry["proposal"]


def curve(instance, default: Mapping, history: Sequence[Mapping], examples: Sequence[dict],
          picks: Sequence[Mapping[str, str]], optimum: float) -> list[tuple[float, float]]:
    """(executed runs, regret) after each history entry, the configuration rebuilt from the accepted ones.
    Exact for every component but an `lrf` router, whose picks are the final run's (its reward model at
    the end, after every Stage 2: an approximation for the earlier points of the Optimas family)."""
    types = [exact.type_index(instance, ex) for ex in examples]

    def regret(config: Mapping) -> float:
        lrf = [s.name for s in instance.components if exact.route_of(config[s.name]) == LRF_ROUTE["route"]]
        by_key: dict[tuple, float] = {}
        scores = []
        for t, chosen in zip(types, picks, strict=True):
            fixed = {n: chosen[n] for n in lrf}
            key = (t, *fixed.values())
            if key not in by_key:
                by_key[key] = exact.expected_reward(instance, exact.names_for(instance, config, t, fixed), t)
            scores.append(by_key[key])
        return optimum - statistics.fmean(scores)

    config, points = dict(default), []
    current = regret(config)
    for entry in history:
        if entry["accepted"] and entry.get("proposal") is not None:
            apply(config, entry)
            current = regret(config)
        points.append((float(entry["runs_so_far"]), current))
    return points


def measure(folder: Path) -> dict:
    """The run's exact regret (reached from its test traces) and its anytime curve."""
    results = json.loads((folder / "results.json").read_text())
    pipe = build(**results["pipeline_info"]["settings"], test_size=results["splits"]["test"])
    inst, rows = pipe.instance, {r["id"]: r for r in pipe.splits.test}
    ids, steps = test_steps(folder)
    examples = [rows[i] for i in ids]
    picks = [{s.name: exact.named_value(st[s.name]["outputs"][s.field]) for s in inst.components} for st in steps]
    optimum = exact.optimum_score(inst, examples)
    reached = exact.expected_of_run(inst, examples, steps)
    initial = exact.expected_score(inst, pipe.system.default_config(), examples)
    points = curve(inst, pipe.system.default_config(), results.get("history") or [], examples, picks, optimum)
    return {"regret": optimum - reached, "reached": reached, "optimum": optimum, "initial": initial,
            "curve": [[x, round(y, 6)] for x, y in points]}


def regret_at(points: Sequence[Sequence[float]], runs: float, initial: float) -> float:
    """The regret of the last configuration reached by `runs` executed runs (the initial one before any)."""
    got = [r for x, r in points if x <= runs]
    return got[-1] if got else initial


def one_step(history: Sequence[Mapping]) -> float | None:
    """The largest spend between two consecutive history entries (None with fewer than two)."""
    spent = [float(e["runs_so_far"]) for e in history]
    return max((b - a for a, b in itertools.pairwise(spent)), default=None)


def row_of(folder: Path, cell: Cell) -> dict:
    results = json.loads((folder / "results.json").read_text())
    measured = json.loads((folder / "regret.json").read_text())
    ledger, history = results["ledger"], results.get("history") or []
    executed = optimization_runs(ledger)
    step = one_step(history)
    overshoot = executed - cell.cap
    flagged = overshoot > (step if step is not None else OVERSHOOT_SHARE * cell.cap)
    by_phase = ledger.get("by_phase") or {}
    named = {p for ps in PHASES.values() for p in ps}
    phases = {label: sum(float((by_phase.get(p) or {}).get("runs", 0.0)) for p in ps) for label, ps in PHASES.items()}
    phases["other"] = sum(float(v.get("runs", 0.0)) for p, v in by_phase.items() if p not in named and p not in FINAL_PHASES)
    return {"cell": cell.name, "options": cell.options, "K": cell.k, "interaction": cell.interaction,
            "seed": int(folder.parent.name[1:]), "method": folder.name, "regret": measured["regret"],
            "reached": measured["reached"], "optimum": measured["optimum"], "initial": measured["initial"],
            "executed_runs": executed, "cap": cell.cap, "overshoot": round(overshoot, 2),
            "one_step": None if step is None else round(step, 2), "flagged": flagged,
            "stopped_by": results.get("stopped") or "its own end", "iterations": len(history),
            "accepted": sum(bool(e["accepted"]) for e in history), **phases, "curve": measured["curve"],
            "results": results}


def rows_of(runs: Path) -> list[dict]:
    by_name = {c.name: c for c in CELLS}
    rows = []
    for f in sorted(runs.glob("*/s*/*/regret.json")):
        cell = by_name.get(f.parent.parent.parent.name)
        if cell is not None and f.parent.name in RUNNABLE:
            rows.append(row_of(f.parent, cell))
    return rows


# -- statistics and the verdict ------------------------------------------------------------------------------
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
    measured = {m: v for m, v in means.items() if v is not None}
    return min(measured, key=measured.get) if measured else None


def paired(a: Mapping[int, float], b: Mapping[int, float]) -> list[float]:
    """a - b on the seeds both have (a seed is one instance: the same in both)."""
    return [a[s] - b[s] for s in sorted(set(a) & set(b))]


def against_global(reg: Regrets, cell: Cell, method: str):
    """(best global search, seed-level 95% interval of method - it) in `cell`, or (name, None) when unmeasured."""
    best = best_global(reg, cell)
    if best is None or (cell.name, method) not in reg:
        return best, None
    diffs = paired(reg[(cell.name, method)], reg[(cell.name, best)])
    return best, seed_interval(diffs) if diffs else None


def headline_met(reg: Regrets, method: str) -> tuple[bool | None, str]:
    """In the headline cell: mean regret at most HALF the best global search's, and the seed-level 95% interval
    of the difference below 0. None when either is unmeasured."""
    best, diff = against_global(reg, HEADLINE_CELL, method)
    own, theirs = mean_of(reg, HEADLINE_CELL, method), None if best is None else mean_of(reg, HEADLINE_CELL, best)
    if own is None or theirs is None:
        return None, f"{method} or the global searches not measured in {HEADLINE_CELL.name}"
    met = own <= HALF * theirs and diff is not None and diff.high < 0
    interval = "no interval (one seed)" if diff is None else f"{diff.estimate:+.3f} [{diff.low:+.3f}, {diff.high:+.3f}]"
    return met, (f"{method} {own:.3f} vs {best} {theirs:.3f} (half: {HALF * theirs:.3f}); difference {interval}")


def rise(reg: Regrets, method_of, k: int, interaction: str):
    """Seed-level 95% interval of regret at the most options minus at the fewest (per seed), K and interaction
    fixed; `method_of(cell)` names the method per cell. None when unmeasured or one seed."""
    low, high = Cell(OPTIONS[0], k, interaction), Cell(OPTIONS[-1], k, interaction)
    a, b = method_of(high), method_of(low)
    if a is None or b is None or (high.name, a) not in reg or (low.name, b) not in reg:
        return None
    diffs = paired(reg[(high.name, a)], reg[(low.name, b)])
    return seed_interval(diffs) if diffs else None


def trend_met(reg: Regrets, method: str) -> tuple[bool | None, str]:
    """At the headline's K and interaction, from the fewest to the most options: `method`'s regret falls or
    holds (its rise's interval does not lie above 0) while the best global search's rises (above 0)."""
    k, interaction = HEADLINE_CELL.k, HEADLINE_CELL.interaction
    own = rise(reg, lambda c: method, k, interaction)
    theirs = rise(reg, lambda c: best_global(reg, c), k, interaction)
    if own is None or theirs is None:
        return None, f"{method} or the global searches not measured at options {OPTIONS[0]} and {OPTIONS[-1]} (2+ seeds)"
    met = own.low <= 0 < theirs.low
    path = " → ".join(f"{fmt(mean_of(reg, Cell(o, k, interaction), method))}" for o in OPTIONS)
    best_path = " → ".join(f"{fmt(mean_of(reg, c, best_global(reg, c) or ''))}"
                           for c in (Cell(o, k, interaction) for o in OPTIONS))
    return met, (f"{method} {path} (rise {own.estimate:+.3f} [{own.low:+.3f}, {own.high:+.3f}]); best global search "
                 f"{best_path} (rise {theirs.estimate:+.3f} [{theirs.low:+.3f}, {theirs.high:+.3f}])")


def verdict(reg: Regrets) -> list[str]:
    """The headline verdict, computed: met when learned Optimas passes both tests; otherwise the bracket that
    explains it (the oracle LRF fails too: the loop; only the learned LRF fails: the LRF)."""
    learned = [headline_met(reg, "optimas"), trend_met(reg, "optimas")]
    oracle = [headline_met(reg, "optimas_oracle"), trend_met(reg, "optimas_oracle")]
    lines = [f"- Headline ({HEADLINE_CELL.name}): {learned[0][1]}.", f"- Options trend: {learned[1][1]}.",
             f"- Oracle bracket: {oracle[0][1]}; {oracle[1][1]}."]
    if any(met is None for met, _ in learned):
        return [*lines, "", "**Verdict: not measured yet** (fill the grid: the command above)."]
    if all(met for met, _ in learned):
        return [*lines, "", "**Verdict: met.** Optimas' regret is at most half the best global search's in the "
                "headline cell (the seed-level 95% interval of the difference below 0), and it falls or holds as "
                "options grow while the best global search's rises."]
    if any(met is None for met, _ in oracle):
        return [*lines, "", "**Verdict: not met**; the oracle bracket is not measured, so which part explains it is open."]
    cause = ("the LRF: with a perfect local reward (lrf=oracle) the same loop meets it, the learned one does not"
             if all(met for met, _ in oracle) else
             "the loop: the oracle bracket (a perfect local reward, lrf=oracle) misses it too")
    return [*lines, "", f"**Verdict: not met.** What explains it: {cause}."]


# -- the report --------------------------------------------------------------------------------------------
def fmt(x, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def with_interval(values: Sequence[float]) -> str:
    ci = seed_interval(values)
    return f"{statistics.fmean(values):.3f}" + ("" if ci is None else f" [{ci.low:.3f}, {ci.high:.3f}]")


def stage1_key(results: Mapping) -> str:
    """What determines a run's Stage 1 (its simulator, seed, reward model and training split): runs of one cell
    and seed that differ only after Stage 1 (optimas, optimas_paper, optimas_no_adapt) share it."""
    config = results["config"]
    what = {"pipeline": config["pipeline"], "seed": config["seed"], "lrf": config["lrf"],
            "train_size": config["budget"]["train_size"], "proposer": config.get("proposer")}
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()


PAIR_BINS = ((0, 20), (20, 40), (40, 80), (80, 10 ** 9))


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


# -- the brackets by what they paid ---------------------------------------------------------------------------
LEARNED, ORACLE, RANDOM, EXACT_LABELS = "optimas", "optimas_oracle", "random_reward", "optimas_exact_labels"


def stage1_runs(row: Mapping) -> float:
    """The executed runs of a run's Stage 1 (its collection and LRF training)."""
    return row["collection"] + row["LRF training"]


def loop_runs(row: Mapping) -> float:
    """The executed runs of a run's loop: all its optimization runs but Stage 1's and Stage 2's (adaptation)."""
    return round(row["executed_runs"] - stage1_runs(row) - row["adaptation"], 4)  # optimization_runs' precision


def charged_oracle(oracle: Mapping, learned: Mapping) -> float:
    """The oracle's regret on its anytime curve at the cap minus the Stage 1 runs learned Optimas paid (same cell
    and seed): the oracle as if it had paid that Stage 1."""
    return regret_at(oracle["curve"], learned["cap"] - stage1_runs(learned), oracle["optimum"] - oracle["initial"])


def matched_random(random: Mapping, learned: Mapping) -> float:
    """Random reward's regret on its anytime curve at the runs learned Optimas spent in its loop (same cell and
    seed): the same loop spend, neither paying a Stage 1 or a Stage 2."""
    return regret_at(random["curve"], loop_runs(learned), random["optimum"] - random["initial"])


def mean_runs(values: Sequence[float]) -> str:
    return f"{round(statistics.fmean(values))}" if values else "-"


def spent(runs: Sequence[Mapping]) -> tuple[str, str, str]:
    """Mean executed runs of Stage 1, Stage 2 and the loop over `runs`."""
    return tuple(mean_runs([f(r) for r in runs]) for f in (stage1_runs, lambda r: r["adaptation"], loop_runs))


def paid_brackets(rows: Sequence[Mapping]) -> list[str]:
    """Per cell, each bracket's regret beside the executed runs it paid (the table's own preface says which)."""
    of = {(r["cell"], r["method"], r["seed"]): r for r in rows}
    lines = ["Each bracket's regret (mean over seeds, seed-level 95% interval) beside what it paid: mean executed "
             "runs of Stage 1 (collection and LRF training), Stage 2 (adaptation) and the loop. Learned Optimas is "
             f"`{LEARNED}`. The free oracle pays no Stage 1. The charged oracle is the oracle's anytime curve read at the "
             "cap minus the Stage 1 runs learned Optimas paid in the same cell and seed, as if the oracle had paid them "
             "(charged, not run). Random reward has no Stage 1; at matched loop spend its curve is read at the executed "
             "runs learned Optimas spent in its loop (its optimization runs minus its Stage 1 and Stage 2) in the same "
             "cell and seed. A reading takes the configuration reached by then (`lrf` routers at their final picks, as "
             f"in the anytime table). The exact-label LRF (`{EXACT_LABELS}`: `{' '.join(OFF_GRID[EXACT_LABELS])}`, off "
             f"the committed grid, `{FILL} --methods {EXACT_LABELS}`) collects the same pairs at the same cost as "
             "learned Optimas, each ordered by the exact expected reward of its candidates.", "",
             "| cell | bracket | seeds | regret [95% CI] | Stage 1 runs | Stage 2 runs | loop runs |",
             "|---|---|---|---|---|---|---|"]
    for cell in CELLS:
        got = {m: [of[k] for s in cell.seeds if (k := (cell.name, m, s)) in of]
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
              f"read at {mean_runs([lr['cap'] - stage1_runs(lr) for _, lr in charged])}")),
            ("exact-label LRF", [r["regret"] for r in got[EXACT_LABELS]], spent(got[EXACT_LABELS])),
            ("random reward, full cap", [r["regret"] for r in got[RANDOM]], spent(got[RANDOM])),
            ("random reward, matched loop spend", [matched_random(r, lr) for r, lr in matched],
             ("0", "0", f"read at {mean_runs([loop_runs(lr) for _, lr in matched])}")),
        ]
        for name, regrets, paid in brackets:
            measured = f"{with_interval(regrets)} | " + " | ".join(paid) if regrets else "not run | - | - | -"
            lines.append(f"| {cell.name} | {name} | {len(regrets)} | {measured} |")
    return lines


def phase_map_report(rows: list[dict]) -> list[str]:
    everything, rows = rows, [r for r in rows if r["method"] in METHODS]  # the grid's tables: its methods alone
    reg = regrets_of(rows)
    order = list(METHODS)
    lines = [f"Fill the grid: `{FILL}` (resumable: finished runs are skipped; `--cells`, `--methods`, `--seeds` "
             "run a slice). Rewrite this report: `python scripts/synthetic_benchmark.py --report-only`.", "",
             f"Grid (fixed before any run): options {list(OPTIONS)} x K {list(KS)} x interaction {list(INTERACTIONS)}, "
             f"simulator {json.dumps(SIMULATOR)}, instance = run seed; seeds {list(SEEDS)} per cell, "
             f"{list(HEADLINE_SEEDS)} in the headline cell {HEADLINE_CELL.name}. Every method: `{' '.join(COMMON + NO_DATA)} "
             f"budget.iterations={ITERATIONS} budget.max_runs=<cap>`, cap = {RUNS_PER_COMPONENT} K executed "
             f"optimization runs. Methods: " + ", ".join(f"{m} (`{' '.join(a)}`)" for m, a in METHODS.items()) + ".",
             "", f"{len(rows)} of {len(planned(CELLS, None, order))} runs measured. Regret = optimum − reached "
             "expected test score (exact, 200 test requests); mean over seeds with the seed-level 95% interval "
             "(Student t; none for one seed).", "", "## Verdict", "", *verdict(reg), "", "## Phase map", "",
             "![phase map](phase_map.png)", "",
             "| cell | seeds | lowest mean regret | best global search | Optimas − best global search [95% CI] |",
             "|---|---|---|---|---|"]
    for cell in CELLS:
        means = {m: mean_of(reg, cell, m) for m in order}
        measured = {m: v for m, v in means.items() if v is not None}
        if not measured:
            continue
        winner = min(measured, key=measured.get)
        best, diff = against_global(reg, cell, "optimas")
        gap = "-" if diff is None else f"{diff.estimate:+.3f} [{diff.low:+.3f}, {diff.high:+.3f}]"
        seeds = {s for (c, _), by_seed in reg.items() if c == cell.name for s in by_seed}
        lines.append(f"| {cell.name} | {len(seeds)} | "
                     f"{winner} {measured[winner]:.3f} | {best or '-'} | {gap} |")
    lines += ["", "## Regret at the cap", "",
              "| cell | method | seeds | regret [95% CI] | executed runs (mean) | cap | most over the cap (runs − cap) | ended by |",
              "|---|---|---|---|---|---|---|---|"]
    groups = [(cell, m, [r for r in rows if r["cell"] == cell.name and r["method"] == m]) for cell in CELLS for m in order]
    groups = [(c, m, g) for c, m, g in groups if g]
    for cell, m, got in groups:
        ended = sorted({str(r["stopped_by"]) for r in got})
        lines.append(f"| {cell.name} | {m} | {len(got)} | {with_interval([r['regret'] for r in got])} | "
                     f"{statistics.fmean(r['executed_runs'] for r in got):.0f} | {cell.cap} | "
                     f"{max(r['overshoot'] for r in got):+.1f} | {', '.join(ended)} |")
    flagged = [r for r in rows if r["flagged"]]
    lines += ["", "Runs over their cap by more than one step (the largest spend between two of their history entries; "
              f"with fewer than two entries, {OVERSHOOT_SHARE:.0%} of the cap): "
              + ("none." if not flagged else ", ".join(f"{r['cell']}/s{r['seed']}/{r['method']} (+{r['overshoot']:.1f}, "
                                                       f"step {fmt(r['one_step'], 1)})" for r in flagged))]
    lines += ["", "## Anytime regret", "", "Mean regret after 10/25/50/100% of the cap, from each run's history "
              "(phase-map/curves.csv; Optimas-family `lrf` routers at their final picks).", "",
              "| cell | method | 10% | 25% | 50% | 100% |", "|---|---|---|---|---|---|"]
    for cell, m, got in groups:
        cells = [statistics.fmean(regret_at(r["curve"], share * cell.cap, r["optimum"] - r["initial"]) for r in got)
                 for share in SHARES]
        lines.append(f"| {cell.name} | {m} | " + " | ".join(f"{c:.3f}" for c in cells) + " |")
    lines += ["", "## Executed runs per phase", "", "Mean over seeds (ledger.by_phase; collection: Stage 1's, or HBC's "
              "reference runs; other: the rest before the final validation and the test).", "",
              "| cell | method | " + " | ".join([*PHASES, "other"]) + " |", "|---|---|" + "---|" * (len(PHASES) + 1)]
    for cell, m, got in groups:
        lines.append(f"| {cell.name} | {m} | " + " | ".join(f"{statistics.fmean(r[p] for r in got):.0f}"
                                                            for p in [*PHASES, "other"]) + " |")
    lines += ["", "## Brackets", "", "Mean regret: the oracle LRF (upper bracket), learned Optimas three ways, "
              "random reward (lower bracket), and the best global search of the cell.", "",
              "| cell | " + " | ".join(BRACKETS) + " | best global search |", "|---|" + "---|" * (len(BRACKETS) + 1)]
    for cell in CELLS:
        if not any((cell.name, m) in reg for m in order):
            continue
        best = best_global(reg, cell)
        lines.append(f"| {cell.name} | " + " | ".join(fmt(mean_of(reg, cell, m)) for m in BRACKETS)
                     + f" | {'-' if best is None else f'{best} {mean_of(reg, cell, best):.3f}'} |")
    lines += ["", "## Brackets by what they paid", "", *paid_brackets(everything)]
    lines += ["", "## LRF test accuracy against the number of pairs", "",
              *lrf_by_pairs(r["results"] for r in rows)]
    return lines


def plot_phase_map(rows: list[dict], path: Path) -> None:
    """Per interaction, options x K: Optimas' mean regret minus the best global search's, and the winner."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    reg = regrets_of(rows)
    fig, axes = plt.subplots(1, len(INTERACTIONS), figsize=(5 * len(INTERACTIONS), 4.8), squeeze=False)
    for ax, interaction in zip(axes[0], INTERACTIONS, strict=True):
        grid = np.full((len(OPTIONS), len(KS)), np.nan)
        for i, o in enumerate(OPTIONS):
            for j, k in enumerate(KS):
                cell = Cell(o, k, interaction)
                means = {m: v for m in METHODS if (v := mean_of(reg, cell, m)) is not None}
                best, diff = against_global(reg, cell, "optimas")
                if not means:
                    ax.text(j, i, "not run", ha="center", va="center", fontsize=8)
                    continue
                winner = min(means, key=means.get)
                own, theirs = mean_of(reg, cell, "optimas"), None if best is None else mean_of(reg, cell, best)
                text = f"lowest: {winner}\n"
                if own is None:
                    text += "optimas not run"
                elif theirs is not None:
                    grid[i, j] = own - theirs
                    text += f"optimas − {best}\n{own - theirs:+.3f}"
                    if diff is not None:
                        text += f" [{diff.low:+.3f}, {diff.high:+.3f}]"
                ax.text(j, i, text, ha="center", va="center", fontsize=7)
        ax.imshow(grid, cmap="RdBu_r", vmin=-0.4, vmax=0.4, aspect="auto")
        ax.set_xticks(range(len(KS)), [f"K={k}" for k in KS])
        ax.set_yticks(range(len(OPTIONS)), [f"{o} options" for o in OPTIONS])
        ax.set_title(f"interaction={interaction}")
    fig.suptitle("Optimas − best global search, mean regret (blue: Optimas lower) [seed-level 95% CI]", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_tables(rows: list[dict], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    columns = [c for c in (rows[0] if rows else {}) if c not in ("curve", "results")]
    with open(out / "runs.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    with open(out / "curves.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["cell", "seed", "method", "executed_runs", "regret"])
        for r in rows:
            writer.writerows([r["cell"], r["seed"], r["method"], x, y] for x, y in r["curve"])


# -- the earlier benchmark (interaction=none, options 4, by K), from its committed tables --------------------
EARLIER_METHODS = ["optimas_no_adapt", "optimas", "global_reward", "hbc", "coordinate_ascent"]
EARLIER_REFERENCE = "optimas_no_adapt"
COUNTS = ("K", "seed", "iterations", "accepted", "changed_components", "lrf_pairs", "lrf_test_pairs")


def earlier_report(folder: Path) -> list[str]:
    """The earlier benchmark's tables, rebuilt from its committed runs.csv, curves.csv and runs/*/results.json
    (its runs' test traces were not kept): each method capped at the reference's executed runs."""
    with open(folder / "runs.csv") as handle:
        rows = [{k: v if k == "method" else None if v == "" else int(float(v)) if k in COUNTS else float(v)
                 for k, v in r.items()} for r in csv.DictReader(handle)]
    with open(folder / "curves.csv") as handle:
        curves: dict[tuple, list] = {}
        for r in csv.DictReader(handle):
            curves.setdefault((int(r["K"]), int(r["seed"]), r["method"]), []).append(
                (float(r["executed_runs"]), float(r["regret"])))
    ks = sorted({r["K"] for r in rows})
    lines = [f"Simulator: {json.dumps({**SIMULATOR, 'options': 4})}, interaction none; instance = run seed. Common "
             f"overrides: `{' '.join(COMMON)}`. The reference ({EARLIER_REFERENCE}): `budget.iterations=2K`; every other "
             "method: `budget.iterations=20K budget.max_runs=<the reference's executed optimization runs>`. Tables "
             "rebuilt from the committed runs.csv, curves.csv and runs/ (`--report-only`).", "",
             "Regret = optimum − reached expected test score (exact, 200 test requests). Mean over seeds "
             "(n = seeds), executed optimization runs in brackets.", "",
             "| K | seeds | " + " | ".join(EARLIER_METHODS) + " |", "|---|---|" + "---|" * len(EARLIER_METHODS)]
    of = {(r["K"], r["seed"], r["method"]): r for r in rows}
    for k in ks:
        cells = []
        for m in EARLIER_METHODS:
            got = [r for r in rows if r["K"] == k and r["method"] == m]
            cells.append(f"{statistics.fmean(r['regret'] for r in got):.3f} "
                         f"({statistics.fmean(r['executed_runs'] for r in got):.0f})" if got else "not run")
        lines.append(f"| {k} | {len({r['seed'] for r in rows if r['K'] == k})} | " + " | ".join(cells) + " |")
    lines += ["", "Regret by share of the run budget (the reference's executed runs of the same K and seed), "
              "mean over seeds (curves.csv; Optimas-family routers at their final picks):", "",
              "| K | method | 10% | 25% | 50% | 100% |", "|---|---|---|---|---|---|"]
    for k in ks:
        for m in EARLIER_METHODS:
            got = [r for r in rows if r["K"] == k and r["method"] == m]
            if not got:
                continue
            cells = []
            for share in SHARES:
                cells.append(statistics.fmean(
                    regret_at(curves.get((k, r["seed"], m), []),
                              share * of[(k, r["seed"], EARLIER_REFERENCE)]["executed_runs"],
                              r["optimum"] - r["initial"]) for r in got))
            lines.append(f"| {k} | {m} | " + " | ".join(f"{c:.3f}" for c in cells) + " |")
    lines += ["", "Initial regret (the unoptimized system) per K: " + ", ".join(
        f"K={k}: {statistics.fmean(r['optimum'] - r['initial'] for r in rows if r['K'] == k):.3f}" for k in ks), "",
        "### Every run", "", "| K | seed | method | regret | reached | optimum | executed runs | cap | iterations | accepted"
        " | components changed | LRF pairs | LRF test acc | wall s | LRF train s | s / 1,000 runs (no LRF training) |",
        "|" + "---|" * 16]
    for r in sorted(rows, key=lambda r: (r["K"], r["seed"], EARLIER_METHODS.index(r["method"]))):
        lines.append("| " + " | ".join(fmt(r[c]) for c in ("K", "seed", "method", "regret", "reached", "optimum", "executed_runs",
                                                 "cap", "iterations", "accepted", "changed_components", "lrf_pairs",
                                                 "lrf_accuracy", "seconds", "lrf_seconds",
                                                 "seconds_per_1000_runs_no_lrf")) + " |")
    results = [json.loads(f.read_text()) for f in sorted((folder / "runs").glob("K*-s*/*/results.json"))]
    return [*lines, "", "### LRF test accuracy against the number of pairs", "", *lrf_by_pairs(results)]


# -- the README's generated blocks ------------------------------------------------------------------------
def marker(name: str, end: bool = False) -> str:
    return f"<!-- {'end of ' if end else ''}generated by scripts/synthetic_benchmark.py --report-only: {name} -->"


def replace_block(text: str, name: str, lines: Sequence[str]) -> str:
    """`text` with the block between `name`'s markers replaced by `lines` (what is outside stays as written)."""
    start, end = marker(name), marker(name, end=True)
    if text.count(start) != 1 or text.count(end) != 1:
        raise SystemExit(f"error: the README needs one '{start}' and one '{end}' line around its {name} block; "
                         "restore them from git")
    head, rest = text.split(start, 1)
    return head + start + "\n" + "\n".join(lines) + "\n" + end + rest.split(end, 1)[1]


def write_report(runs: Path, out: Path) -> None:
    rows = rows_of(runs)
    write_tables(rows, runs)
    plot_phase_map(rows, out / "phase_map.png")
    readme = out / "README.md"
    text = replace_block(readme.read_text(), "phase map", phase_map_report(rows))
    text = replace_block(text, "by K", earlier_report(out))
    readme.write_text(text)
    print(f"wrote {readme.relative_to(ROOT) if readme.is_relative_to(ROOT) else readme}: {len(rows)} runs measured")


def pick(names: str | None, known: Sequence[str], what: str) -> list[str]:
    if names is None:
        return list(known)
    got = [n for n in names.split(",") if n]
    unknown = [n for n in got if n not in known]
    if unknown:
        raise SystemExit(f"error: unknown {what} {', '.join(unknown)}; choose from {', '.join(known)}")
    return got


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", help="comma-separated cells, e.g. o4-K10-none (default: all)")
    parser.add_argument("--methods", help="comma-separated methods (default: the grid's; also: "
                                          f"{', '.join(OFF_GRID)})")
    parser.add_argument("--seeds", help="comma-separated seeds, within each cell's own (default: all)")
    parser.add_argument("--runs", default="docs/results/synthetic/phase-map",
                        help="where the run folders go, relative to the repository root")
    parser.add_argument("--out", default="docs/results/synthetic", help="the README and phase_map.png")
    parser.add_argument("--dry-run", action="store_true", help="print the slice's commands and counts, run nothing")
    parser.add_argument("--report-only", action="store_true", help="rewrite the report from the run folders")
    args = parser.parse_args(argv)
    cells_by_name = {c.name: c for c in CELLS}
    cells = [cells_by_name[n] for n in pick(args.cells, list(cells_by_name), "cell")]
    methods = list(METHODS) if args.methods is None else pick(args.methods, list(RUNNABLE), "method")
    try:
        seeds = None if args.seeds is None else [int(s) for s in args.seeds.split(",") if s]
    except ValueError:
        raise SystemExit(f"error: --seeds {args.seeds!r} must be comma-separated integers, e.g. 0,1,2") from None
    runs = Path(args.runs)
    if runs.is_absolute():
        raise SystemExit(f"error: --runs {runs} must be relative to the repository root (committed files name no machine path)")
    todo = planned(cells, seeds, methods)
    if args.dry_run:
        left = [(c, s, m) for c, s, m in todo if not (ROOT / run_folder(runs, c, s, m) / "results.json").exists()]
        for c, s, m in left:
            print(" ".join(command(run_folder(runs, c, s, m), c, s, m)))
        print(f"{len(todo)} runs in the slice ({len(todo) - len(left)} finished, {len(left)} to run)")
        return
    if not args.report_only:
        for c, s, m in todo:
            folder = run_folder(runs, c, s, m)
            run_one(folder, command(folder, c, s, m))
    write_report(ROOT / runs, ROOT / args.out)


if __name__ == "__main__":
    main()
