"""Finding run folders and reading their results.json; a run that cannot be read becomes a Problem."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from optimas_cli.errors import UserError
from optimas_cli.optim.history import history_problem
from optimas_cli.system.run_folder import LOCK_FILE, lock_holder

# What a run folder holds before the run does any work: a folder with nothing else failed before it
# started (a bad pipeline, missing data), so there is nothing to resume.
BEFORE_START = {"config.yaml", "config.resumed.yaml", "optimas.log", ".hydra", LOCK_FILE}

# A folder is a run folder when optimas (or Hydra on its behalf) wrote one of these into it.
RUN_MARKERS = ("results.json", "config.yaml", "optimas.log", ".hydra")

# What each kind of run must hold for its tables; a missing key makes the run a Problem.
REQUIRED = {
    "run": ("pipeline", "method", "metric", "test.mean", "test.std", "test.scores", "test.n", "ledger.runs",
            "ledger.tokens", "ledger.calls"),
    "train-lrf": ("pipeline", "method", "lrf.components", "lrf.mean_pairwise_accuracy", "ledger.runs"),
    "collect": ("pipeline", "method", "ledger.runs"),
}
REQUIRED["eval"] = REQUIRED["run"]  # `optimas eval`: scored like a run, reported in its own table
LRF_COMPONENT_KEYS = ("pairwise_accuracy", "judge_accuracy", "n_pairs")
# The type each required key must have (a hand-edited or damaged file can hold anything).
NUMBER, TEXT = (int, float), (str,)
TYPES = {"pipeline": TEXT, "method": TEXT, "metric": TEXT, "test.mean": NUMBER, "test.std": NUMBER,
         "test.scores": (list,), "test.n": (int,), "ledger.runs": NUMBER, "ledger.tokens": NUMBER,
         "ledger.calls": NUMBER, "lrf.mean_pairwise_accuracy": NUMBER + (type(None),),
         "lrf.components": (dict,)}


@dataclass
class Run:
    folder: Path
    results: dict
    variant: str = ""  # what sets this run apart from others of its pipeline x method (set by variants.py)
    lrf_variant: str = ""

    @property
    def pipeline(self) -> str:
        return str(self.results["pipeline"])

    @property
    def method(self) -> str:
        return str(self.results["method"])

    @property
    def kind(self) -> str:
        return kind_of(self.results)


@dataclass
class Problem:
    folder: Path
    reason: str


@dataclass
class Duplicate:
    """A run with the same pipeline, method, settings and seed as one already counted: the same
    experiment run again (e.g. by two sweeps), so not a replicate."""

    folder: Path
    kept: Path


@dataclass
class RunSet:
    runs: list[Run] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    duplicates: list[Duplicate] = field(default_factory=list)


def split_duplicates(runs: list[Run]) -> tuple[list[Run], list[Duplicate]]:
    """One run per (pipeline, method, variant, seed), the newest; the others become Duplicates.
    Pooling them would narrow a CI with copies of the same measurement. Needs run.variant assigned."""
    def newest_first(run: Run):
        return (-(run.folder / "results.json").stat().st_mtime if (run.folder / "results.json").exists() else 0.0,
                str(run.folder))

    kept: dict[tuple, Run] = {}
    duplicates = []
    for run in sorted(runs, key=newest_first):
        if run_seed(run) is None:  # an older results.json without its config: nothing to compare
            continue
        config = run.results.get("config") or {}
        scored = (config.get("config_file"), config.get("eval_file"))  # what an eval run scored, on what
        key = (run.kind, run.pipeline, run.method, run.variant, run.lrf_variant, repr(run_seed(run)), scored)
        if key in kept:
            duplicates.append(Duplicate(run.folder, kept[key].folder))
        else:
            kept[key] = run
    dropped = {d.folder for d in duplicates}
    return [r for r in runs if r.folder not in dropped], duplicates


def run_seed(run: Run):
    """The run's seed; None when results.json predates recording its config."""
    return (run.results.get("config") or {}).get("seed")


def kind_of(results: dict) -> str:
    method = results.get("method")
    return method if method in ("train-lrf", "collect", "eval") else "run"


def lookup(data: dict, dotted: str):
    """data['a']['b'] for 'a.b'; raises KeyError naming the missing key."""
    value = data
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            raise KeyError(dotted)
        value = value[part]
    return value


def is_run_folder(path: Path) -> bool:
    return any((path / marker).exists() for marker in RUN_MARKERS)


def find_run_folders(paths: list[str]) -> list[Path]:
    """Run folders named directly, or found below the given folders (a Hydra multirun folder)."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise UserError(f"no such folder: {raw}", "pass run folders or a multirun folder (e.g. multirun/<date>/<time>)")
        if path.is_file():
            if path.name != "results.json":
                raise UserError(f"{raw} is a file, not a run folder", "pass the folder that holds results.json")
            path = path.parent
        if is_run_folder(path):
            found.append(path)
            continue
        for root, dirs, _ in os.walk(path):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))  # .submitit, .hydra: launcher files
            here = Path(root)
            if here != path and is_run_folder(here):
                found.append(here)
                dirs[:] = []  # lrf/, adapters/ inside a run are not runs
    # One entry per folder however it was named, kept as the user named it: report tables and CSVs then
    # show the paths they were given (relative ones stay relative), not where the checkout sits.
    unique: dict[Path, Path] = {}
    for p in found:
        unique.setdefault(p.resolve(), p)
    return list(unique.values())


def read_results(folder: Path) -> dict | None:
    """The folder's results.json (None when it has none); a damaged one is a UserError naming it."""
    target = folder / "results.json"
    if not target.exists():
        return None
    try:
        results = json.loads(target.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise UserError(f"{target} is not UTF-8 text ({exc.reason} at byte {exc.start})",
                        "restore it, or run the experiment again") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{target} is not valid JSON ({exc}); half-written or edited by hand",
                        "restore it, or run the experiment again") from None
    except OSError as exc:
        raise UserError(f"{target} cannot be read ({exc.strerror or exc})", "check the file's permissions") from None
    if not isinstance(results, dict):
        raise UserError(f"{target} does not hold a JSON object", "restore it, or run the experiment again")
    return results


def read_run(folder: Path) -> Run | Problem:
    try:
        results = read_results(folder)
    except UserError as err:
        return Problem(folder, err.problem.replace(str(folder / "results.json"), "results.json"))
    if results is None:
        pid = lock_holder(folder)
        if pid is not None:
            return Problem(folder, f"no results.json yet: the run is still in progress (pid {pid})")
        failed = failed_before_start(folder)
        return Problem(folder, failed + "; fix that and run its command again" if failed else
                       f"no results.json: the run did not finish (see its optimas.log); continue it with its "
                       f"command plus resume={folder}")
    if kind_of(results) == "run" and "test" not in results and results.get("test_skipped"):
        return Problem(folder, f"test skipped: {results['test_skipped']}")  # a capped run, not a damaged one
    missing = [key for key in REQUIRED[kind_of(results)] if not _has(results, key)]
    if missing:
        return Problem(folder, f"results.json lacks {', '.join(missing)}")
    mistyped = [key for key in (*REQUIRED[kind_of(results)], "lrf.mean_pairwise_accuracy") if key in TYPES
                and _has(results, key) and not _typed(lookup(results, key), TYPES[key])]
    if mistyped:
        key = mistyped[0]
        return Problem(folder, f"results.json: {key} is {str(lookup(results, key))[:40]!r}, not of type "
                               f"{' or '.join(t.__name__ for t in TYPES[key])}")
    broken = history_problem(results["history"]) if "history" in results else None
    if broken:
        return Problem(folder, f"results.json: {broken}")
    if "lrf" in results:
        broken = _lrf_problem(results["lrf"])
        if broken:
            return Problem(folder, f"results.json: {broken}")
    return Run(folder, results)


def failed_before_start(folder: Path) -> str | None:
    """The error a run stopped on before doing any work (the last error its log holds, and no file
    besides its config and log), or None: a run that started, or was killed, can be resumed."""
    try:
        if any(entry.name not in BEFORE_START for entry in folder.iterdir()):
            return None
        lines = (folder / "optimas.log").read_text(errors="replace").splitlines()
    except OSError:
        return None
    error = next((line.split("[ERROR] - ", 1)[1] for line in reversed(lines) if "[ERROR] - " in line), None)
    return f"the run failed before it started: {error}" if error else None


def _typed(value, kinds: tuple) -> bool:
    if isinstance(value, bool):
        return bool in kinds
    if isinstance(value, list) and kinds == (list,):
        return all(isinstance(v, NUMBER) and not isinstance(v, bool) for v in value)  # test.scores
    return isinstance(value, kinds)


def _has(results: dict, key: str) -> bool:
    try:
        lookup(results, key)
    except KeyError:
        return False
    return True


def _lrf_problem(lrf) -> str | None:
    if not isinstance(lrf, dict) or not isinstance(lrf.get("components"), dict):
        return "lrf lacks components"
    if "mean_pairwise_accuracy" not in lrf:
        return "lrf lacks mean_pairwise_accuracy"
    for name, row in lrf["components"].items():
        missing = [k for k in LRF_COMPONENT_KEYS if not isinstance(row, dict) or k not in row]
        if missing:
            return f"lrf.components.{name} lacks {', '.join(missing)}"
    return None


def load_runs(paths: list[str]) -> RunSet:
    folders = find_run_folders(paths)
    if not folders:
        raise UserError(f"no run folders under {', '.join(paths)}",
                        "pass folders written by `optimas run` (they hold results.json and config.yaml)")
    out = RunSet(sources=list(paths))
    for folder in folders:
        item = read_run(folder)
        (out.runs if isinstance(item, Run) else out.problems).append(item)
    return out
