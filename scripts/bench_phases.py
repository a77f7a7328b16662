"""Where an Amazon Optimas run's time goes, phase by phase, on a fixed small slice (`make bench`).

Runs `optimas run pipeline=amazon method=optimas` on the slice below with an empty LM-call cache (the
converted models are linked in, so nothing is converted again), then prints each phase's seconds from
the ledger beside the previous bench's, and the scores and decisions the run reached. A speed change
must leave those scores and decisions as they were: the bench says whether they match.

    python scripts/bench_phases.py [--label NAME] [--keep]     # results in outputs/bench/<label>.json

The previous bench is outputs/bench/last.json; each bench replaces it.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SLICE = ["pipeline=amazon", "method=optimas", "seed=0", "repeats=1", "budget=smoke", "budget.train_size=3",
         "budget.search_size=2", "budget.fresh_size=1", "budget.iterations=2", "budget.val_size=4",
         "budget.test_size=4"]
OUT = Path("outputs/bench")


def cache_root() -> Path:
    from optimas_cli.lm.paths import cache_root as root

    return root(None)


def run_slice(cache: Path, run_dir: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    cmd = [sys.executable, "-m", "optimas_cli.cli", "run", *SLICE, f"lm.cache_dir={cache}", f"hydra.run.dir={run_dir}"]
    started = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    results = json.loads((run_dir / "results.json").read_text())
    return {"wall": round(wall, 1), "phases": {p: row["seconds"] for p, row in results["ledger"]["by_phase"].items()},
            "compute_by_kind": results["ledger"]["compute_by_kind"], "outcome": outcome(results)}


def outcome(results: dict) -> dict:
    """What a speed change must not move: scores per example, decisions, LRF pairs and accuracy."""
    return {
        "validation": results["validation"]["per_example"], "test": results["test"]["per_example"],
        "decisions": [(h["component"], h["accepted"], h["val_candidate"]) for h in results["history"]],
        "pairs": {c: p for c, p in (results["ledger"]["by_phase"].get("lrf_collection", {}).get("pairs") or {}).items()},
        "best_config": results["best_config"],
    }


def show(now: dict, before: dict | None) -> None:
    phases = sorted(set(now["phases"]) | set((before or {}).get("phases", {})))
    print(f"{'phase':<20} {'seconds':>9} {'previous':>9}")
    for p in phases:
        prev = (before or {}).get("phases", {}).get(p)
        shown = '' if prev is None else f"{prev:>9.1f}"
        print(f"{p:<20} {now['phases'].get(p, 0):>9.1f} {shown}")
    prev_wall = '' if before is None else f"{before['wall']:>9.1f}"
    print(f"{'wall':<20} {now['wall']:>9.1f} {prev_wall}")
    print("compute by kind:", now["compute_by_kind"])
    print("test per example:", now["outcome"]["test"], "validation:", now["outcome"]["validation"])
    if before is not None:
        same = before["outcome"] == now["outcome"]
        print("results: the same as the previous bench" if same else "results: DIFFERENT from the previous bench")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", default=time.strftime("%Y%m%d-%H%M%S"))
    parser.add_argument("--keep", action="store_true", help="keep the run folder under outputs/bench/")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="optimas-bench-") as tmp:
        cache = Path(tmp) / "cache"
        cache.mkdir()
        for shared in ("models", "bm25"):  # converted models: not what is measured
            if (cache_root() / shared).exists():
                (cache / shared).symlink_to(cache_root() / shared)
        run_dir = OUT / f"run-{args.label}" if args.keep else Path(tmp) / "run"
        now = run_slice(cache, run_dir)
    now["label"], now["slice"] = args.label, SLICE
    last = OUT / "last.json"
    before = json.loads(last.read_text()) if last.exists() else None
    show(now, before)
    (OUT / f"{args.label}.json").write_text(json.dumps(now, indent=2))
    last.write_text(json.dumps(now, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
