"""tracking=mlflow|wandb: a finished run folder logged for real (MLflow's local database store, W&B's
offline mode): resolved config, scores with CIs, each iteration's validation delta and gate decision, LRF
accuracy per component, the ledger and the artifacts; one parent run per sweep. Skipped when the
tracker's package is not installed (the `mlflow` / `wandb` extras; `dev` installs both)."""
from __future__ import annotations

import csv
import json
import shutil
import struct
import time
from pathlib import Path

import pytest

from optimas_cli.errors import UserError
from optimas_cli.system.results_file import read_results
from optimas_cli.tracking.record import RunRecord, flatten
from tests.cli_runner import optimas

ROOT = Path(__file__).resolve().parent.parent
GATES = ROOT / "docs" / "results" / "hotpotqa-gates"


@pytest.fixture
def optimas_run(tmp_path) -> Path:
    """A real Optimas run (HotpotQA, strict gate): history with gate decisions, LRF report, traces."""
    folder = shutil.copytree(GATES / "runs" / "optimas-strict", tmp_path / "optimas-strict")
    results = read_results(folder)
    (folder / "best_config.json").write_text(json.dumps(results["best_config"]))
    return folder


def test_the_record_holds_what_the_run_folder_and_the_report_say(optimas_run):
    results = read_results(optimas_run)
    record = RunRecord.read(optimas_run)
    assert record.status == "finished" and record.params == flatten(results["config"])
    assert record.tags["pipeline"] == "hotpotqa" and record.tags["method"] == "optimas"
    assert record.metrics["test.mean"] == results["test"]["mean"]
    # The CI is the report's: the same bootstrap over the same traces (docs/results/hotpotqa-gates).
    with (GATES / "table2_paired.csv").open() as handle:
        row = next(r for r in csv.DictReader(handle) if r["variant"] == "method.gate=strict")
    assert (record.metrics["test.ci_low"], record.metrics["test.ci_high"]) == (float(row["ci_low"]),
                                                                              float(row["ci_high"]))
    history = results["history"]
    assert [r["iteration"] for r in record.iterations] == [e["iteration"] for e in history]
    assert [r["accepted"] for r in record.iterations] == [float(e["accepted"]) for e in history]
    assert [r["gate_delta"] for r in record.iterations] == [e["gate"]["delta"] for e in history]
    assert [r["val_delta"] for r in record.iterations] == [e["val_candidate"] - e["val_before"] for e in history]
    for name, component in results["lrf"]["components"].items():  # n_pairs counts the test pairs only
        assert record.metrics[f"lrf.{name}.test_pairs"] == component["n_pairs"]
        assert record.metrics[f"lrf.{name}.train_pairs"] == component["pairs"]["trained"]
        assert f"lrf.{name}.n_pairs" not in record.metrics
    assert record.metrics["lrf.train_pairs"] == results["lrf"]["n_train_pairs"] > 0
    assert record.metrics["ledger.runs"] == results["ledger"]["runs"]
    assert record.metrics["ledger.tokens"] == results["ledger"]["tokens"]
    assert {p.name for p in record.artifacts} >= {"results.json", "best_config.json", "config.yaml"}
    assert {p.name for p in record.plots()} == {"validation_reward.png", "gate_decisions.png"}


def test_mlflow_logs_iterations_lrf_ledger_and_artifacts(optimas_run, tmp_path):
    pytest.importorskip("mlflow")
    from optimas_cli.tracking.trackers import MLflowTracker

    tracker = MLflowTracker({"uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "experiment": "t",
                             "artifact_location": str(tmp_path / "artifacts")})
    run_id = tracker.log(RunRecord.read(optimas_run), parent=None)
    client = tracker.mlflow.MlflowClient()
    run = client.get_run(run_id)
    results = read_results(optimas_run)
    assert run.info.status == "FINISHED" and run.data.params["method.gate"] == "strict"
    assert run.data.metrics["test.mean"] == results["test"]["mean"]
    assert run.data.metrics["ledger.usd"] == results["ledger"]["usd"]
    deltas = client.get_metric_history(run_id, "iteration.gate_delta")
    assert [(m.step, m.value) for m in deltas] == [(e["iteration"], e["gate"]["delta"]) for e in results["history"]]
    assert [m.value for m in client.get_metric_history(run_id, "iteration.accepted")] == [
        float(e["accepted"]) for e in results["history"]]
    files = {a.path for a in client.list_artifacts(run_id)} | {a.path for a in client.list_artifacts(run_id, "plots")}
    assert {"results.json", "best_config.json", "plots/gate_decisions.png", "plots/validation_reward.png"} <= files


def test_an_mlflow_sweep_is_one_parent_run_with_a_child_per_job(tmp_path):
    pytest.importorskip("mlflow")
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    proc = optimas("run", "-m", "pipeline=toy_hint,toy_retriever", "method=unoptimized", "repeats=1",
                   "tracking=mlflow", f"tracking.uri={uri}", f"tracking.artifact_location={tmp_path / 'art'}",
                   f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("tracked: mlflow run") == 2
    client = mlflow.MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("optimas").experiment_id])
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = {r.info.run_name: r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    assert set(children) == {"0-toy_hint-unoptimized", "1-toy_retriever-unoptimized"}
    for name, child in children.items():
        results = read_results(tmp_path / "sweep" / name)
        assert child.data.metrics["test.mean"] == results["test"]["mean"]
        assert child.data.params["pipeline._target_"] == results["config"]["pipeline"]["_target_"]
        assert {"results.json", "best_config.json"} <= {a.path for a in client.list_artifacts(child.info.run_id)}
    assert parent.data.metrics["jobs_finished"] == 2.0
    assert parent.data.metrics["test.mean.best"] == max(c.data.metrics["test.mean"] for c in children.values())


def wandb_records(run_dir: Path, timeout: float = 60.0) -> list:
    """The records of an offline W&B run file, once it holds the run's exit record: wandb's service process can
    still be writing the file when `run.finish()` returns (a clean-clone CI run read it with no run record)."""
    from google.protobuf.message import DecodeError

    deadline = time.monotonic() + timeout
    while True:
        files = sorted(run_dir.glob("*.wandb"))
        try:
            records = list(_wandb_file_records(files[0])) if files else []
        except DecodeError:  # a record cut where the writer is
            records = []
        if any(r.HasField("exit") for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.5)


def _wandb_file_records(path: Path):
    """The records of an offline W&B run file (LevelDB-log framing: 32 KiB blocks, 7-byte headers)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    pos, block, pending = 7, 32768, b""  # after the file header (":W&B", magic, version)
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # too little room for a header: the block is padded
            pos += block - pos % block
            continue
        length, kind = struct.unpack("<HB", data[pos + 4 : pos + 7])
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind in (1, 2):
            pending = chunk
        elif kind in (3, 4):
            pending += chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            yield record


def test_wandb_offline_run_holds_the_record(optimas_run, tmp_path):
    pytest.importorskip("wandb")
    from optimas_cli.tracking.trackers import WandbTracker

    tracker = WandbTracker({"project": "t", "entity": None, "mode": "offline", "dir": str(tmp_path)})
    run_id = tracker.log(RunRecord.read(optimas_run), parent="sweep-1")
    (run_dir,) = (tmp_path / "wandb").glob(f"offline-run-*-{run_id}")
    records = wandb_records(run_dir)
    results = read_results(optimas_run)
    run = next(r.run for r in records if r.HasField("run"))
    assert (run.run_group, run.job_type, run.display_name) == ("sweep-1", "run", "optimas-strict")
    config = {item.key: json.loads(item.value_json) for item in run.config.update}
    assert {k: v for k, v in config.items() if k != "_wandb"} == json.loads(json.dumps(flatten(results["config"])))
    steps = {}
    for r in records:
        if r.HasField("history"):
            items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
            steps[r.history.step.num] = items
    for entry in results["history"]:
        assert steps[entry["iteration"]]["iteration/gate_delta"] == entry["gate"]["delta"]
        assert steps[entry["iteration"]]["iteration/accepted"] == float(entry["accepted"])
    summary = {i.key or "/".join(i.nested_key): json.loads(i.value_json)
               for r in records if r.HasField("summary") for i in r.summary.update}
    assert summary["test.mean"] == results["test"]["mean"] and summary["ledger.runs"] == results["ledger"]["runs"]
    (artifact,) = [r.artifact for r in records if r.HasField("artifact")]
    names = {entry.path for entry in artifact.manifest.contents}
    assert {"results.json", "best_config.json", "plots/gate_decisions.png"} <= names


def test_a_wandb_run_through_the_cli(tmp_path):
    pytest.importorskip("wandb")
    proc = optimas("run", "pipeline=toy_hint", "method=unoptimized", "repeats=1", "tracking=wandb",
                   f"tracking.dir={tmp_path}", f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = (tmp_path / "wandb").glob("offline-run-*")
    summary = {i.key: json.loads(i.value_json) for r in wandb_records(run_dir) if r.HasField("summary")
               for i in r.summary.update}
    assert summary["test.mean"] == read_results(tmp_path / "run")["test"]["mean"]


def test_a_missing_tracker_package_is_one_line_before_the_run(monkeypatch):
    import importlib.util

    from optimas_cli.tracking.trackers import check_installed

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UserError, match=r"tracking=mlflow needs the mlflow-skinny package.*pip install -e '\.\[mlflow\]'"):
        check_installed("mlflow")
    check_installed("none")  # nothing to install


@pytest.mark.parametrize("uri", ["file:./mlruns", "./mlruns", "mlruns"])
def test_mlflows_file_store_is_refused_before_the_run_with_the_database_store_named(tmp_path, uri):
    proc = optimas("plan", "pipeline=toy_hint", "method=unoptimized", "tracking=mlflow", f"tracking.uri={uri}", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"optimas: tracking.uri={uri!r} is not allowed") and "sqlite:///mlflow.db" in line


def test_a_database_or_server_uri_is_accepted(tmp_path):
    for uri in (f"sqlite:///{tmp_path / 'mlflow.db'}", "http://localhost:5000", "databricks"):
        proc = optimas("plan", "pipeline=toy_hint", "method=unoptimized", "tracking=mlflow", f"tracking.uri={uri}",
                       cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-2000:]
