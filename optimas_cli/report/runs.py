"""Finding run folders (on disk, or packed as `<folder>.runs.tar.xz`: report/run_archive.py) and reading their
results.json; a run that cannot be read becomes a Problem."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from optimas_cli.errors import UserError
from optimas_cli.optim.history import history_problem
from optimas_cli.report.run_archive import SUFFIX, archive_of, folder_of, is_archive, located, unpacked
from optimas_cli.system.results_file import read_results
from optimas_cli.system.run_folder import failed_before_start, lock_holder

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

    @property
    def files(self) -> Path:
        """Where the run's files lie: its folder, or its place in the unpacked copy of the archive holding it."""
        return located(self.folder)


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
        results = run.files / "results.json"
        return -results.stat().st_mtime if results.exists() else 0.0, str(run.folder)

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
    """Run folders named directly, or found below the given folders (a Hydra multirun folder); a packed folder
    (`<folder>.runs.tar.xz`, named either way) is read as the folder it holds."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if is_archive(path):
            path = folder_of(path)
        where = located(path)
        if not where.exists():
            raise UserError(f"no such folder: {raw}", "pass run folders or a multirun folder (e.g. multirun/<date>/<time>)")
        if where.is_file():
            if path.name != "results.json":
                raise UserError(f"{raw} is a file, not a run folder", "pass the folder that holds results.json")
            path, where = path.parent, where.parent
        if where == path:
            _refuse_packed_twice(path)
        found += _run_folders_in(path, where)
    # One entry per folder however it was named, kept as the user named it: report tables and CSVs then
    # show the paths they were given (relative ones stay relative), not where the checkout sits.
    unique: dict[Path, Path] = {}
    for p in found:
        unique.setdefault(p.resolve(), p)
    return list(unique.values())


def _run_folders_in(shown: Path, where: Path) -> list[Path]:
    """`shown` if it is a run folder, else the run folders below it (lrf/, adapters/ inside a run are not
    runs), in name order; `where` is where its files lie."""
    if is_run_folder(where):
        return [shown]
    below: dict[str, Path] = {}
    for entry in sorted(where.iterdir()):
        if entry.name.startswith("."):  # .submitit, .hydra: launcher files
            continue
        if entry.is_dir() and not entry.is_symlink():
            below[entry.name] = entry
        elif is_archive(entry):
            _refuse_packed_twice(folder_of(entry), shown / folder_of(entry).name)
            below[folder_of(entry).name] = unpacked(entry)
    return [run for name in sorted(below) for run in _run_folders_in(shown / name, below[name])]


def _refuse_packed_twice(folder: Path, shown: Path | None = None) -> None:
    """A folder on disk beside an archive of the same name: either could hold runs the other lacks."""
    if folder.name and folder.is_dir() and is_archive(archive_of(folder)):
        raise UserError(f"{shown or folder} is both a folder and packed ({folder.name}{SUFFIX})",
                        f"unpack the archive into the folder (tar -xJf {folder.name}{SUFFIX}, beside it) and remove "
                        "it, or remove the folder")


def read_run(folder: Path) -> Run | Problem:
    where = located(folder)
    try:
        results = read_results(where)
    except UserError as err:
        return Problem(folder, err.problem.replace(str(where / "results.json"), "results.json")
                       .replace(str(where), str(folder)))
    if results is None:
        pid = lock_holder(where)
        if pid is not None:
            return Problem(folder, f"no results.json yet: the run is still in progress (pid {pid})")
        failed = failed_before_start(where)
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
