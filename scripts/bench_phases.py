"""Where a run's time, tokens and memory go, phase by phase, on fixed small slices (`make bench`).

Each slice is one `optimas run` with an empty LM-call cache (the converted models and BM25 indexes are
linked in, so nothing is converted again). Per phase it prints, from the run's own results.json:
wall seconds (ledger.by_phase; `optimize` holds the phases that run inside it), LM calls, cache hits,
prompt and generated tokens (ledger.lm.by_phase: tokens only of calls really generated), prefill and
decode tokens/s of the embedded model (ledger.by_phase.*.engine, lm/local/clock.py), and the process's
peak RSS so far when the phase last ended (a running peak: it only grows). The `run` row is the whole
process: its wall seconds, all its calls and tokens, and its peak RSS as the OS reports it (wait4).

Slices: `amazon` (pipeline=amazon method=optimas on the smoke budget cut smaller, as below) and
`make-run` (the Makefile's `make run`, `optimas run pipeline=hotpotqa`, with the same smaller budget:
budget=smoke, train 3, search 2, fresh 1, 2 iterations, val 4, test 4, repeats=1).

    python scripts/bench_phases.py [--slices amazon make-run] [--label NAME] [--keep]
    python scripts/bench_phases.py --compare REV      # or: make bench BENCH_ARGS="--compare REV"

Plain: prints each slice beside the previous bench (outputs/bench/last.json; each bench replaces it).
--compare REV: checks REV out into a temporary git worktree (removed afterwards), runs every slice on REV
and on this working tree in one invocation, each with its own empty LM cache, and prints per-phase
ratios REV / now (absolute times on a shared machine are noisy; ratios from one invocation are the
figure) and whether the results are the same: scores per example, decisions, preference pairs, best
configuration. What REV's results.json does not record shows as "—". Records: outputs/bench/<label>.json.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

SMALL_BUDGET = ["seed=0", "repeats=1", "budget=smoke", "budget.train_size=3", "budget.search_size=2",
                "budget.fresh_size=1", "budget.iterations=2", "budget.val_size=4", "budget.test_size=4"]
SLICES = {
    "amazon": ["pipeline=amazon", "method=optimas", *SMALL_BUDGET],
    "make-run": ["pipeline=hotpotqa", *SMALL_BUDGET],  # the Makefile's `run` target's arguments first
}
OUT = Path("outputs/bench")
MISSING = "—"
# (column, row key, format) of the per-phase table; ratios are REV / now for the RATIO_KEYS
COLUMNS = [("seconds", "seconds", "{:.1f}"), ("calls", "calls", "{:d}"), ("cache hits", "cache_hits", "{:d}"),
           ("prompt tok", "prompt_tokens", "{:d}"), ("generated tok", "completion_tokens", "{:d}"),
           ("prefill tok/s", "prefill_tok_s", "{:.0f}"), ("decode tok/s", "decode_tok_s", "{:.1f}"),
           ("peak RSS so far MiB", "peak_rss_mib", "{:.0f}")]
RATIO_KEYS = ["seconds", "calls", "prompt_tokens", "completion_tokens", "peak_rss_mib"]


# ---- reading a run -----------------------------------------------------------------------------
def phase_rows(results: dict) -> dict[str, dict]:
    """Per phase, what the bench shows, read from results.json; None where the run did not record it."""
    ledger = results.get("ledger") or {}
    timed, lm = ledger.get("by_phase") or {}, (ledger.get("lm") or {}).get("by_phase") or {}
    rows = {}
    for phase in sorted(set(timed) | set(lm)):
        t, usage, engine = timed.get(phase, {}), lm.get(phase, {}), timed.get(phase, {}).get("engine")
        rows[phase] = {"seconds": t.get("seconds"), **usage_columns(usage),
                       "prefill_tok_s": rate(engine, "prefill"), "decode_tok_s": rate(engine, "decode"),
                       "peak_rss_mib": t.get("peak_rss_mib_so_far")}
    return rows


def usage_columns(usage: dict) -> dict:
    return {k: usage.get(k) for k in ("calls", "cache_hits", "prompt_tokens", "completion_tokens")}


def rate(engine: dict | None, part: str) -> float | None:
    """Tokens per second of the embedded model's prefill or decode; None where none was timed."""
    if not engine or not engine.get(f"{part}_seconds"):
        return None
    return engine[f"{part}_tokens"] / engine[f"{part}_seconds"]


def outcome(results: dict) -> dict:
    """What a speed change must not move: scores per example, decisions, LRF pairs, best configuration."""
    by_phase = (results.get("ledger") or {}).get("by_phase") or {}
    return {
        "validation": (results.get("validation") or {}).get("per_example"),
        "test": (results.get("test") or {}).get("per_example"),
        "decisions": [(h.get("component"), h.get("accepted"), h.get("val_candidate")) for h in results.get("history", [])],
        "pairs": (by_phase.get("lrf_collection") or {}).get("pairs"),
        "best_config": results.get("best_config"),
    }


def record(results: dict, wall: float, peak_rss_mib: float) -> dict:
    total = (results.get("ledger") or {}).get("lm", {}).get("total", {})
    return {"wall": round(wall, 1), "phases": phase_rows(results),
            "run": {"seconds": round(wall, 1), **usage_columns(total), "prefill_tok_s": None, "decode_tok_s": None,
                    "peak_rss_mib": round(peak_rss_mib, 1)},
            "compute_by_kind": (results.get("ledger") or {}).get("compute_by_kind"), "outcome": outcome(results)}


# ---- comparing ---------------------------------------------------------------------------------
def ratio(before, now) -> float | None:
    if before is None or now is None or now == 0:
        return None
    return before / now


def differences(before: dict, now: dict) -> list[str]:
    """The parts of the outcome that differ (JSON-normalised: tuples and lists compare equal)."""
    a, b = json.loads(json.dumps(before)), json.loads(json.dumps(now))
    return [key for key in sorted(set(a) | set(b)) if a.get(key) != b.get(key)]


def cell(value, fmt: str) -> str:
    if value is None:
        return MISSING
    return fmt.format(round(value) if fmt == "{:d}" else value)


def values_table(title: str, rec: dict) -> Table:
    table = Table(title=title, caption="optimize holds the phases that run inside it; tokens: of generated calls only; "
                  "peak RSS so far: the process's running peak when the phase last ended (run: the whole process's)")
    table.add_column("phase", no_wrap=True)
    for name, _, _ in COLUMNS:
        table.add_column(name, justify="right")
    for phase, row in [*rec["phases"].items(), ("run", rec["run"])]:
        table.add_row(phase, *[cell(row.get(key), fmt) for _, key, fmt in COLUMNS])
    return table


def ratio_table(title: str, before: dict, now: dict) -> Table:
    table = Table(title=title)
    table.add_column("phase", no_wrap=True)
    names = dict((key, name) for name, key, _ in COLUMNS)
    for key in RATIO_KEYS:
        table.add_column(names[key], justify="right")
    phases = sorted(set(before["phases"]) | set(now["phases"]))
    rows = [(p, before["phases"].get(p, {}), now["phases"].get(p, {})) for p in phases]
    for phase, b, n in [*rows, ("run", before["run"], now["run"])]:
        table.add_row(phase, *[cell(ratio(b.get(key), n.get(key)), "{:.2f}") for key in RATIO_KEYS])
    return table


def show(console: Console, name: str, now: dict, before: dict | None, before_label: str) -> None:
    console.print(values_table(f"{name}: this working tree", now))
    if before is None:
        return
    console.print(values_table(f"{name}: {before_label}", before))
    console.print(ratio_table(f"{name}: {before_label} / now", before, now))
    diff = differences(before["outcome"], now["outcome"])
    console.print(f"{name}: results the same as {before_label}" if not diff
                  else f"[red]{name}: results DIFFERENT from {before_label} in {', '.join(diff)}[/]")


# ---- running -----------------------------------------------------------------------------------
def cache_root() -> Path:
    from optimas_cli.lm.paths import cache_root as root

    return root(None)


def empty_cache(folder: Path) -> Path:
    """An empty LM-call cache with the converted models and BM25 indexes linked in (not what is measured)."""
    folder.mkdir(parents=True)
    for shared in ("models", "bm25"):
        if (cache_root() / shared).exists():
            (folder / shared).symlink_to(cache_root() / shared)
    return folder


def run_slice(code: Path, args: list[str], cache: Path, run_dir: Path, what: str) -> dict:
    """`optimas run` of the code in `code` on `args`; its record. The whole process's peak RSS comes from
    wait4, so it is measured the same way whatever the revision records."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    cmd = [sys.executable, "-m", "optimas_cli.cli", "run", *args, f"lm.cache_dir={cache}", f"hydra.run.dir={run_dir}"]
    errors = run_dir.parent / f"{run_dir.name}.stderr"
    errors.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with errors.open("w") as stderr:
        process = subprocess.Popen(cmd, cwd=code, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        try:
            _, status, usage = os.wait4(process.pid, 0)
        except BaseException:  # Ctrl-C, SIGTERM: no run left behind
            process.kill()
            process.wait()
            raise
    wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        tail = (errors.read_text().strip().splitlines() or ["(no output)"])[-1]
        raise SystemExit(f"bench: {what} failed (exit {process.returncode}): {tail}")
    peak_mib = usage.ru_maxrss / (1 << 20) if sys.platform == "darwin" else usage.ru_maxrss / 1024
    return record(json.loads((run_dir / "results.json").read_text()), wall, peak_mib)


def measure(code: Path, name: str, work: Path, tag: str, keep: bool) -> dict:
    run_dir = (OUT / f"run-{tag}-{name}").resolve() if keep else work / f"run-{tag}-{name}"
    shutil.rmtree(run_dir, ignore_errors=True)  # a folder kept by an earlier bench would be resumed, not run
    return run_slice(code, SLICES[name], empty_cache(work / f"cache-{tag}-{name}"), run_dir, f"{name} on {tag}")


def git(*args: str, cwd: Path | None = None) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"bench: git {' '.join(args)} failed: {done.stderr.strip().splitlines()[-1:]}")
    return done.stdout.strip()


def compare(rev: str, names: list[str], work: Path, keep: bool, console: Console) -> dict:
    commit = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], capture_output=True,
                            text=True).stdout.strip()
    if not commit:
        raise SystemExit(f"bench: unknown revision {rev!r}: give a commit, branch or tag (git log --oneline)")
    checkout = work / "rev"
    git("worktree", "add", "--detach", str(checkout), commit)
    records: dict = {"rev": rev, "commit": commit, "before": {}, "now": {}}
    try:
        for name in names:
            console.print(f"[dim]{name}: running on {rev} ({commit[:10]}), then on this working tree[/]")
            records["before"][name] = measure(checkout, name, work, "rev", keep)
            records["now"][name] = measure(Path.cwd(), name, work, "now", keep)
            show(console, name, records["now"][name], records["before"][name], rev)
    finally:
        git("worktree", "remove", "--force", str(checkout))
    return records


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slices", nargs="+", choices=list(SLICES), default=list(SLICES))
    parser.add_argument("--compare", metavar="REV", help="also run the slices on this git revision and print REV / now")
    parser.add_argument("--label", default=time.strftime("%Y%m%d-%H%M%S"))
    parser.add_argument("--keep", action="store_true", help="keep the run folders under outputs/bench/")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("bench: stopped by SIGTERM"))  # so the worktree is removed
    console = Console() if sys.stdout.isatty() else Console(width=160)  # a log file: full tables, not 80 columns
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="optimas-bench-") as tmp:
        if args.compare:
            saved = {"label": args.label, **compare(args.compare, args.slices, Path(tmp), args.keep, console)}
            (OUT / f"{args.label}.json").write_text(json.dumps(saved, indent=2))
            return 0
        last = OUT / "last.json"
        previous = json.loads(last.read_text()).get("slices", {}) if last.exists() else {}
        now = {}
        for name in args.slices:
            now[name] = measure(Path.cwd(), name, Path(tmp), "now", args.keep)
            show(console, name, now[name], previous.get(name), "the previous bench")
    saved = {"label": args.label, "slices": now, "args": {n: SLICES[n] for n in args.slices}}
    (OUT / f"{args.label}.json").write_text(json.dumps(saved, indent=2))
    last.write_text(json.dumps(saved, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
