"""The synthetic benchmark (issue 27): regret against executed system runs, at matched cost, by K.

For each K and seed, the reference method runs first (optimas_no_adapt, `iterations` = 2K; optimas itself
is too slow to be the reference on a 2-core CPU at K >= 30, where each Stage 2 re-collects pairs for every
component and scores every LRF route: measured 3-5 minutes per accepted update at K = 50); every other
method, optimas included, then gets the executed system runs the reference spent optimizing as its cap (budget.max_runs, Table 3's count: the final validation
and the test left out) and enough iterations to spend it. Each run is an ordinary `optimas run` into
<runs>/K<k>-s<seed>/<method>; a finished one (results.json present) is not run again, so the grid can be
run in pieces and the report rewritten at any time (--report-only).

Regret = the optimum's expected test score minus the reached configuration's, both exact
(pipelines/synthetic/exact.py): a router's picks are read from the run's own test traces.
"""
from __future__ import annotations

import argparse
import csv
import gzip
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from optimas_cli.report.paper_tables import optimization_runs  # noqa: E402
from pipelines.synthetic import exact  # noqa: E402
from pipelines.synthetic.system import build  # noqa: E402

# Fixed before any measurement (issue 27): the simulator, the budget, the reward model, the methods.
SIMULATOR = {"shape": "chain", "kinds": "mix", "options": 4, "input_types": 3, "noise": 0.5, "coupling": 0.5,
             "marks": 8}
COMMON = ["budget=synthetic", "proposer=pool", "repeats=1", "lrf.judge.enabled=false", "lrf.train_backbone=heads",
          "lrf.max_length=96"]
REFERENCE = "optimas_no_adapt"
CAPPED = ["optimas", "global_reward", "hbc", "coordinate_ascent"]


def overrides(k: int, seed: int) -> list[str]:
    return ["pipeline=synthetic", f"pipeline.components={k}", f"seed={seed}",
            *[f"pipeline.{key}={value}" for key, value in SIMULATOR.items()], *COMMON]


def run_one(folder: Path, args: list[str]) -> float:
    """One `optimas run` into `folder` (skipped when it finished before); its wall seconds."""
    if (folder / "results.json").exists():
        return 0.0
    shutil.rmtree(folder, ignore_errors=True)
    folder.parent.mkdir(parents=True, exist_ok=True)
    command = [str(Path(sys.executable).with_name("optimas")), "run", *args, f"hydra.run.dir={folder}"]
    print(" ".join(command[1:]), flush=True)
    start = time.perf_counter()
    with open(folder.parent / f"{folder.name}.log", "w") as log:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode != 0 and not (folder / "results.json").exists():  # 3: stopped by its cap, results written
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): see {folder.parent / folder.name}.log")
    return time.perf_counter() - start


def run_grid(runs: Path, ks: list[int], seeds: list[int], methods: list[str]) -> None:
    for k in ks:
        for seed in seeds:
            base = runs / f"K{k}-s{seed}"
            run_one(base / REFERENCE, [*overrides(k, seed), f"method={REFERENCE}", f"budget.iterations={2 * k}"])
            cap = optimization_runs(json.loads((base / REFERENCE / "results.json").read_text())["ledger"])
            for method in methods:
                run_one(base / method, [*overrides(k, seed), f"method={method}", f"budget.iterations={20 * k}",
                                        f"budget.max_runs={cap}"])


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


def curve(pipe, results: dict, ids: list[str], steps: list[dict]) -> list[tuple[float, float]]:
    """(executed runs, regret) after each judged proposal, the configuration rebuilt from the history.
    Exact for every component but an `lrf` router, whose picks are the final run's (its reward model at
    the end, after every Stage 2: an approximation for the earlier points of the Optimas family)."""
    inst, rows = pipe.instance, {r["id"]: r for r in pipe.splits.test}
    final = [{s.name: exact.named_value(st[s.name]["outputs"][s.field]) for s in inst.components} for st in steps]
    optimum = exact.optimum_score(inst, pipe.splits.test)
    config, points = dict(pipe.system.default_config()), []
    for entry in results.get("history", []):
        if entry["accepted"] and isinstance(entry["component"], str):
            config[entry["component"]] = entry["proposal"]
        scores = []
        for i, picks in zip(ids, final, strict=True):
            t = exact.type_index(inst, rows[i])
            names = {s.name: picks[s.name] if exact.route_of(config[s.name]) == "lrf" else exact.name_of(s, config[s.name], t)
                     for s in inst.components}
            scores.append(exact.expected_reward(inst, names, t))
        points.append((entry["runs_so_far"], optimum - statistics.fmean(scores)))
    return points


def regret_at(points: list[tuple[float, float]], runs: float, initial: float) -> float:
    """The regret of the last configuration accepted by `runs` executed runs (the initial one before any)."""
    got = [r for x, r in points if x <= runs]
    return got[-1] if got else initial


def measure(folder: Path) -> dict:
    results = json.loads((folder / "results.json").read_text())
    settings = results["pipeline_info"]["settings"]
    pipe = build(**settings, test_size=results["splits"]["test"])
    rows = {r["id"]: r for r in pipe.splits.test}
    ids, steps = test_steps(folder)
    reached = exact.expected_of_run(pipe.instance, [rows[i] for i in ids], steps)
    optimum = exact.optimum_score(pipe.instance, pipe.splits.test)
    initial = exact.expected_score(pipe.instance, pipe.system.default_config(), pipe.splits.test)
    ledger = results["ledger"]
    optimizing = sum(float(p.get("seconds", 0.0)) for n, p in ledger["by_phase"].items()
                     if n not in ("test", "test_initial", "final_validation"))
    runs = optimization_runs(ledger)
    lrf = results.get("lrf") or {}
    points = curve(pipe, results, ids, steps)
    changed = [n for n, v in results["best_config"].items() if v != pipe.system.default_config()[n]]
    return {
        "K": settings["components"], "seed": results["config"]["seed"], "method": results["method"],
        "regret": optimum - reached, "reached": reached, "optimum": optimum, "initial": initial,
        "executed_runs": runs, "cap": ledger.get("caps", {}).get("max_runs"),
        "iterations": len(results.get("history", [])), "accepted": sum(e["accepted"] for e in results["history"]),
        "changed_components": len(changed), "seconds": ledger["seconds"],
        "lrf_seconds": ledger.get("compute_by_kind", {}).get("lrf_training", 0.0),
        "seconds_per_1000_runs_no_lrf": 1000 * (optimizing - ledger.get("compute_by_kind", {}).get("lrf_training", 0.0))
        / runs if runs else None,
        "lrf_pairs": lrf.get("n_pairs"), "lrf_test_pairs": lrf.get("n_test_pairs"),
        "lrf_accuracy": lrf.get("mean_pairwise_accuracy"),
        "curve": points,
    }


PAIR_BINS = ((0, 20), (20, 40), (40, 80), (80, 10 ** 9))


def lrf_by_pairs(runs: Path) -> list[str]:
    """Per component of every Optimas-family run: Stage 1's training pairs against its r_k's accuracy on
    its held-out test pairs (components with fewer than lrf.min_test_pairs pairs have no test split)."""
    points = []
    for f in sorted(runs.glob("K*-s*/optimas*/results.json")):
        results = json.loads(f.read_text())
        kinds = results["pipeline_info"]["kinds"]
        for name, c in ((results.get("lrf") or {}).get("components") or {}).items():
            if c.get("pairwise_accuracy") is not None:
                points.append((c["pairs"]["collected"], c["pairwise_accuracy"], kinds[name], c["n_pairs"]))
    lines = ["| pairs collected for the component | components | by kind | mean test accuracy | test pairs |",
             "|---|---|---|---|---|"]
    for lo, hi in PAIR_BINS:
        got = [p for p in points if lo <= p[0] < hi]
        if got:
            kinds = {k: sum(p[2] == k for p in got) for k in ("prompt", "choice", "route")}
            lines.append(f"| {lo}–{hi if hi < 10 ** 9 else '…'} | {len(got)} | "
                         + ", ".join(f"{k} {n}" for k, n in kinds.items() if n)
                         + f" | {statistics.fmean(p[1] for p in got):.3f} | {sum(p[3] for p in got)} |")
    return lines


def fmt(x, digits=3) -> str:
    return "-" if x is None else f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def write_report(runs: Path, out: Path, command: str) -> None:
    rows = [measure(f.parent) for f in sorted(runs.glob("K*-s*/*/results.json"))]
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "runs.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=[c for c in rows[0] if c != "curve"], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    with open(out / "curves.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["K", "seed", "method", "executed_runs", "regret"])
        for r in rows:
            writer.writerows([r["K"], r["seed"], r["method"], x, round(y, 6)] for x, y in r["curve"])
    for f in sorted(runs.glob("K*-s*/*/results.json")):  # the runs' small files
        dest = out / "runs" / f.parent.parent.name / f.parent.name
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("results.json", "best_config.json", "config.yaml"):
            if (f.parent / name).exists():
                shutil.copy(f.parent / name, dest / name)
    methods = [REFERENCE, *CAPPED]
    ks = sorted({r["K"] for r in rows})
    lines = ["# Synthetic benchmark: regret at matched executed system runs", "", f"Command: `{command}`", "",
             f"Simulator (fixed before measuring): {json.dumps(SIMULATOR)}; instance = run seed. "
             f"Common overrides: `{' '.join(COMMON)}`. the reference (optimas_no_adapt): `budget.iterations=2K`; every other method: "
             "`budget.iterations=20K budget.max_runs=<the reference's executed optimization runs>`.", "",
             "Regret = optimum − reached expected test score (exact, 200 test requests). Mean over seeds "
             "(n = seeds), executed optimization runs in brackets.", "",
             "| K | seeds | " + " | ".join(methods) + " |", "|---|---|" + "---|" * len(methods)]
    for k in ks:
        cells = []
        for m in methods:
            got = [r for r in rows if r["K"] == k and r["method"] == m]
            cells.append(f"{statistics.fmean(r['regret'] for r in got):.3f} ({statistics.fmean(r['executed_runs'] for r in got):.0f})"
                         if got else "not run")
        seeds = len({r["seed"] for r in rows if r["K"] == k})
        lines.append(f"| {k} | {seeds} | " + " | ".join(cells) + " |")
    lines += ["", "Regret by share of the run budget (the cap: the reference's executed runs of the same K and seed), "
              "mean over seeds, from each run's history (curves.csv; Optimas-family routers at their final picks):",
              "", "| K | method | 10% | 25% | 50% | 100% |", "|---|---|---|---|---|---|"]
    for k in ks:
        for m in methods:
            got = [r for r in rows if r["K"] == k and r["method"] == m]
            if not got:
                continue
            caps = {r["seed"]: next((o["executed_runs"] for o in rows if o["K"] == k and o["seed"] == r["seed"]
                                     and o["method"] == REFERENCE), r["executed_runs"]) for r in got}
            cells = [statistics.fmean(regret_at(r["curve"], share * caps[r["seed"]], r["optimum"] - r["initial"])
                                      for r in got) for share in (0.1, 0.25, 0.5, 1.0)]
            lines.append(f"| {k} | {m} | " + " | ".join(f"{c:.3f}" for c in cells) + " |")
    lines += ["", "Initial regret (the unoptimized system) per K: " + ", ".join(
        f"K={k}: {statistics.fmean(r['optimum'] - r['initial'] for r in rows if r['K'] == k):.3f}" for k in ks), ""]
    lines += ["## Every run", "", "| K | seed | method | regret | reached | optimum | executed runs | cap | iterations"
              " | accepted | components changed | LRF pairs | LRF test acc | wall s | LRF train s | s / 1,000 runs (no LRF training) |",
              "|" + "---|" * 16]
    for r in sorted(rows, key=lambda r: (r["K"], r["seed"], methods.index(r["method"]) if r["method"] in methods else 99)):
        lines.append("| " + " | ".join(fmt(r[c]) for c in ("K", "seed", "method", "regret", "reached", "optimum",
                                                         "executed_runs", "cap", "iterations", "accepted",
                                                         "changed_components", "lrf_pairs", "lrf_accuracy", "seconds",
                                                         "lrf_seconds", "seconds_per_1000_runs_no_lrf")) + " |")
    lines += ["", "## LRF test accuracy against the number of pairs", "", *lrf_by_pairs(runs)]
    (out / "README.md").write_text("\n".join(lines) + "\n")
    print((out / "README.md").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", default="3,10,30,50", help="numbers of components")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--methods", default=",".join(CAPPED), help="the capped methods (the reference always runs first)")
    parser.add_argument("--runs", default="outputs/synthetic-benchmark", help="where the run folders go")
    parser.add_argument("--out", default="docs/results/synthetic", help="the report and the runs' small files")
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args()
    runs = Path(args.runs)
    if not args.report_only:
        run_grid(runs, [int(k) for k in args.k.split(",")], [int(s) for s in args.seeds.split(",")],
                 [m for m in args.methods.split(",") if m])
    write_report(runs, Path(args.out), "python scripts/synthetic_benchmark.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
