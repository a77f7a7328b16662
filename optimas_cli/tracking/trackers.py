"""The trackers: each maps a RunRecord onto its own API, imported only when chosen (optional extras)."""
from __future__ import annotations

import importlib
import importlib.util
import json
from collections.abc import Mapping
from pathlib import Path

from optimas_cli.errors import UserError
from optimas_cli.tracking.record import RunRecord

EXTRAS = {"mlflow": "mlflow-skinny", "wandb": "wandb"}


def require(module: str):
    """The tracker's package, or one line naming the extra that installs it."""
    check_installed(module)
    return importlib.import_module(module)


def check_installed(module: str) -> None:
    """Before a run spends anything: the chosen tracker's package is there (found, not imported)."""
    if module in EXTRAS and importlib.util.find_spec(module) is None:
        raise UserError(f"tracking={module} needs the {EXTRAS[module]} package, which is not installed",
                        f"pip install -e '.[{module}]' (or tracking=none)")


def check_store(tracking: Mapping) -> None:
    """Before a run spends anything: an MLflow database file (sqlite:///<path>) lies in a folder that exists.
    MLflow would create the folder at the end of the run, so a typo in the path became a stray folder."""
    uri = str(tracking.get("uri") or "") if tracking.get("name") == "mlflow" else ""
    if not uri.startswith("sqlite:///"):
        return
    # sqlite:////abs/x.db names an absolute path, sqlite:///x.db one relative to the working directory
    database = Path(uri.removeprefix("sqlite:///").split("?")[0])
    if database.name and database.name != ":memory:" and not database.parent.is_dir():
        raise UserError(f"tracking.uri={uri} names a database in {database.parent}, which does not exist",
                        f"create it first (mkdir -p {database.parent}), or point tracking.uri at an existing folder")


class MLflowTracker:
    """One MLflow run per optimas run, nested under the sweep's parent run; params are the resolved config."""

    MAX_PARAM = 6000  # MLflow's limit on one param value, in characters
    BATCH = 100  # params per request MLflow accepts

    def __init__(self, settings: dict):
        self.mlflow = require("mlflow")
        self.mlflow.set_tracking_uri(str(settings["uri"]))
        self.experiment = str(settings["experiment"])
        client = self.mlflow.MlflowClient()
        found = client.get_experiment_by_name(self.experiment)
        self.experiment_id = found.experiment_id if found else client.create_experiment(
            self.experiment, artifact_location=_artifact_location(settings.get("artifact_location")))

    def start_parent(self, name: str, tags: dict[str, str]) -> str:
        run = self.mlflow.MlflowClient().create_run(self.experiment_id, run_name=name, tags=tags)
        return run.info.run_id

    def end_parent(self, parent: str, records: list[RunRecord]) -> None:
        client = self.mlflow.MlflowClient()
        for key, value in summary_of(records).items():
            client.log_metric(parent, key, value)
        client.log_dict(parent, job_rows(records), "jobs.json")
        client.set_terminated(parent)

    def log(self, record: RunRecord, parent: str | None) -> str:
        from mlflow.entities import Metric, Param

        client = self.mlflow.MlflowClient()
        tags = dict(record.tags)
        if "code.commit" in tags:  # MLflow's own field for it: its UI shows the commit on the run's page
            tags["mlflow.source.git.commit"] = tags["code.commit"]
        if parent:
            tags["mlflow.parentRunId"] = parent
        run = client.create_run(self.experiment_id, run_name=record.name, tags=tags)
        run_id = run.info.run_id
        params = [Param(k, str(v)[: self.MAX_PARAM]) for k, v in record.params.items()]
        for i in range(0, len(params), self.BATCH):
            client.log_batch(run_id, params=params[i : i + self.BATCH])
        metrics = [Metric(k, v, 0, 0) for k, v in record.metrics.items()]
        for row in record.iterations:
            step = int(row["iteration"])
            metrics += [Metric(f"iteration.{k}", v, 0, step) for k, v in row.items() if k != "iteration"]
        for i in range(0, len(metrics), 1000):
            client.log_batch(run_id, metrics=metrics[i : i + 1000])
        for path in record.artifacts:
            client.log_artifact(run_id, str(path))
        for path in record.plots():
            client.log_artifact(run_id, str(path), artifact_path="plots")
        client.set_tag(run_id, "optimas.status", record.status)
        client.set_terminated(run_id, status="FINISHED" if record.status == "finished" else "FAILED")
        return run_id


class WandbTracker:
    """One W&B run per optimas run; a sweep's runs share a group, and its parent run (job_type sweep)
    holds the table of its jobs. `tracking.mode=offline` writes ./wandb for a later `wandb sync`."""

    def __init__(self, settings: dict):
        self.wandb = require("wandb")
        self.settings = settings

    def _init(self, name: str, group: str | None, job_type: str, config: dict | None = None):
        s = self.settings
        return self.wandb.init(project=str(s["project"]), entity=s.get("entity"), mode=str(s["mode"]),
                               dir=str(Path(s.get("dir") or ".").resolve()), name=name, group=group,
                               job_type=job_type, config=config, reinit="create_new")

    def start_parent(self, name: str, tags: dict[str, str]) -> str:
        return name  # W&B has no nesting: the sweep's name is the group its runs share

    def end_parent(self, parent: str, records: list[RunRecord]) -> None:
        run = self._init(f"{parent}-sweep", parent, "sweep")
        run.summary.update(summary_of(records))
        jobs = job_rows(records)
        if jobs:
            columns = sorted({k for job in jobs for k in job})
            run.log({"jobs": self.wandb.Table(columns=columns, data=[[job.get(c) for c in columns] for job in jobs])})
        run.finish()

    def log(self, record: RunRecord, parent: str | None) -> str:
        run = self._init(record.name, parent, "run", config=record.params)
        run.tags = tuple(f"{k}={v}" for k, v in record.tags.items() if k != "folder")
        for row in record.iterations:
            run.log({f"iteration/{k}": v for k, v in row.items() if k != "iteration"}, step=int(row["iteration"]))
        run.summary.update(record.metrics | {"status": record.status, "folder": str(record.folder.resolve())})
        artifact = self.wandb.Artifact(f"run-{run.id}", type="optimas-run", metadata=record.tags)
        for path in record.artifacts:
            artifact.add_file(str(path))
        for path in record.plots():
            artifact.add_file(str(path), name=f"plots/{path.name}")
        run.log_artifact(artifact)
        run.finish(exit_code=0 if record.status == "finished" else 1)
        return run.id


TRACKERS = {"mlflow": MLflowTracker, "wandb": WandbTracker}


def tracker_for(settings: dict):
    """The tracker `tracking.name` names, or None for tracking=none."""
    name = str(settings.get("name", "none"))
    if name == "none":
        return None
    if name not in TRACKERS:
        raise UserError(f"unknown tracker {name!r}", f"use tracking={' | tracking='.join(['none', *TRACKERS])}")
    return TRACKERS[name](settings)


def _artifact_location(value) -> str | None:
    return None if not value else Path(str(value)).expanduser().resolve().as_uri()


def summary_of(records: list[RunRecord]) -> dict[str, float]:
    """What a sweep's parent run shows: how many jobs finished, and the best and mean test score."""
    tests = [r.metrics["test.mean"] for r in records if "test.mean" in r.metrics]
    out = {"jobs": float(len(records)), "jobs_finished": float(sum(r.status == "finished" for r in records))}
    if tests:
        out |= {"test.mean.best": max(tests), "test.mean.mean": sum(tests) / len(tests)}
    return out


def job_rows(records: list[RunRecord]) -> list[dict]:
    return [json.loads(json.dumps({"run": r.name, **r.tags, **{k: v for k, v in r.metrics.items()
                                                                if k.startswith("test")}})) for r in records]
