"""What earlier runs of a pipeline measured, for `optimas plan`: the newest results.json under outputs/ or
multirun/, its collection's preference share, and a method's pace per executed run (a stopped run's last
checkpoint included, so a long run that was killed times its own continuation)."""
from __future__ import annotations

import json
from pathlib import Path

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from optimas_cli.errors import UserError
from optimas_cli.flows.resume import option_name
from optimas_cli.system.budget import optimization_pace
from optimas_cli.system.ledger import RunLedger
from optimas_cli.system.results_file import read_results
from optimas_cli.system.run_folder import ACCOUNTS_FILE


def previous_run(pipeline: str, method: str, root: Path = Path(".")) -> tuple[Path, dict] | None:
    """The newest results.json of the same pipeline (the same method preferred) under outputs/ or multirun/."""
    found = []
    for pattern in ("outputs/*/*/results.json", "multirun/*/*/*/results.json"):
        for path in root.glob(pattern):
            try:
                results = read_results(path.parent)
            except UserError:
                continue
            if results.get("pipeline") == pipeline and "ledger" in results:
                found.append((results.get("method") == method, path.stat().st_mtime, path, results))
    if not found:
        return None
    _, _, path, results = max(found, key=lambda f: f[:2])
    return path.parent, results


def measured_pairs(folder: Path) -> tuple[int, int] | None:
    """(preference pairs, candidate pairs considered) of an earlier run's collection, from its
    collect_stats.json (the candidate pairs that found no preference tied downstream or were the same
    text); None where it collected none."""
    try:
        stats = json.loads((folder / "collect_stats.json").read_text())
        considered = sum(s["pairs"] + s["near_ties"] + s["identical_outputs"] for s in stats.values())
        return (sum(s["pairs"] for s in stats.values()), considered) if considered else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def earlier_pace(pipeline: str, method: str, root: Path, exclude: Path | None = None) -> tuple[float, Path] | None:
    """The newest measured pace of `method` on `pipeline` under outputs/ or multirun/: a finished run's
    results.json, or a stopped run's last checkpoint (accounts.json), so a long run that was killed
    times its own continuation."""
    found = []
    for pattern in ("outputs/*/*/config.yaml", "multirun/*/*/*/config.yaml"):
        for config_file in root.glob(pattern):
            folder = config_file.parent
            if exclude is not None and folder.resolve() == exclude.resolve():
                continue
            try:
                config = OmegaConf.to_container(OmegaConf.load(config_file))
                if (option_name(config, "pipeline"), option_name(config, "method")) != (pipeline, method):
                    continue
                ledger = _measured_ledger(folder)
            except (OSError, ValueError, KeyError, TypeError, OmegaConfBaseException, UserError):
                continue  # a damaged or half-written folder measures nothing
            if ledger is not None and (pace := optimization_pace(ledger)) is not None:
                found.append((folder.stat().st_mtime, pace, folder))
    if not found:
        return None
    _, pace, folder = max(found, key=lambda f: f[0])
    return pace, folder


def _measured_ledger(folder: Path) -> dict | None:
    """A run folder's ledger as results.json stores it: the finished run's, else its last checkpoint's
    (None for a checkpoint written before the ledger recorded its number of components)."""
    if (folder / "results.json").is_file():
        return (read_results(folder) or {}).get("ledger")
    if not (folder / ACCOUNTS_FILE).is_file():
        return None
    state = json.loads((folder / ACCOUNTS_FILE).read_text())["ledger"]
    if not state.get("num_components"):
        return None
    ledger = RunLedger(int(state["num_components"]))
    ledger.restore(state)
    return ledger.to_dict()
