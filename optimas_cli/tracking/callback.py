"""The Hydra callback behind `tracking=mlflow|wandb`: after each job it logs the finished run folder;
a sweep (-m) first opens one parent run that every job joins, and closes it with a summary."""
from __future__ import annotations

import json
import logging
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from optimas_cli.errors import UserError
from optimas_cli.tracking.record import RunRecord
from optimas_cli.tracking.trackers import tracker_for

PARENT_FILE = "tracking_parent.json"  # in the sweep folder: the parent run its jobs join
log = logging.getLogger("optimas")
console = Console(stderr=True, highlight=False, soft_wrap=True)


def settings(config: DictConfig) -> dict:
    node = OmegaConf.select(config, "tracking")
    return OmegaConf.to_container(node, resolve=True) if node is not None else {"name": "none"}


class TrackingCallback(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        tracker = tracker_for(settings(config))
        if tracker is None:
            return
        sweep = Path(str(config.hydra.sweep.dir))
        sweep.mkdir(parents=True, exist_ok=True)
        parent = tracker.start_parent(_sweep_name(sweep), {"sweep": str(sweep.resolve())})
        (sweep / PARENT_FILE).write_text(json.dumps({"tracker": settings(config)["name"], "parent": parent}))

    def on_job_end(self, config: DictConfig, job_return=None, **kwargs) -> None:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hydra = HydraConfig.get()
        parent = None
        if hydra.mode == RunMode.MULTIRUN:
            parent = read_parent(Path(str(hydra.sweep.dir)))
        track_folder(settings(config), Path(str(hydra.runtime.output_dir)), parent)

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        sweep = Path(str(config.hydra.sweep.dir))
        parent = read_parent(sweep)
        tracker = tracker_for(settings(config)) if parent else None
        if tracker is None:
            return
        records = [RunRecord.read(f.parent) for f in sorted(sweep.glob("*/config.yaml"))]
        tracker.end_parent(parent, records)


def track_folder(tracking: dict, folder: Path, parent: str | None = None) -> str | None:
    """Log one run folder; a tracker that fails says so in one line and leaves the run as it is."""
    tracker = tracker_for(tracking)
    if tracker is None:
        return None
    try:
        run_id = tracker.log(RunRecord.read(folder), parent)
    except UserError:
        raise
    except Exception as exc:  # the run's own files are complete; only the tracker's copy is missing
        message = f"tracking={tracking['name']}: could not log {folder} ({type(exc).__name__}: {exc})"
        log.warning(message)
        console.print(f"[yellow]optimas: {message}[/]")
        return None
    log.info("tracked as %s run %s", tracking["name"], run_id)
    console.print(f"tracked: {tracking['name']} run {run_id}")
    return run_id


def read_parent(sweep: Path) -> str | None:
    path = sweep / PARENT_FILE
    return json.loads(path.read_text())["parent"] if path.is_file() else None


def _sweep_name(sweep: Path) -> str:
    """multirun/2026-12-01/21-40-00 -> 2026-12-01_21-40-00 (a sweep folder set by hand keeps its name)."""
    return f"{sweep.parent.name}_{sweep.name}" if sweep.parent.name[:1].isdigit() else sweep.name
