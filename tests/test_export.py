"""`optimas export <run folder> [--out FILE]`: one readable file (YAML, or JSON) with each component's
configuration, the pipeline and its settings, the LM, the seed and the run's test score with its CI;
`optimas_cli.api.load` reads it back as it reads the run folder, adapter folders named relative to the
file; two exports diff line by line. (The round trip on an Optimas run with LRF routes is in
tests/test_python_api.py, beside the run it reuses.)"""
from __future__ import annotations

import difflib
import json
import shutil
from pathlib import Path

import pytest
import yaml

import optimas_cli.api as optimas
from optimas_cli.cli import main
from optimas_cli.errors import UserError
from optimas_cli.stats import mean_ci
from optimas_cli.system.results_file import read_results
from optimas_pipelines.toys.retriever import rows as retriever_rows


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A finished toy run (the retriever toy, unoptimized: seconds, no LM)."""
    folder = tmp_path_factory.mktemp("runs") / "toy"
    optimas.run("pipeline=toy_retriever", "method=unoptimized", "repeats=1", folder=folder)
    return folder


def export(*args: str) -> int:
    return main(["export", *args])


def test_the_export_holds_the_configuration_the_pipeline_and_the_test_score(run):
    assert export(str(run)) == 0
    data = yaml.safe_load((run / "export.yaml").read_text())
    results = read_results(run)
    ci = mean_ci(results["test"]["per_example"])
    assert data["format"] == "optimas-export/1" and data["method"] == "unoptimized"
    assert data["pipeline"] == {"name": "toy_retriever", "settings": {"_target_": "optimas_pipelines.toys.retriever.build"}}
    assert data["components"] == json.loads((run / "best_config.json").read_text())
    assert data["test"] == {"metric": "f1", "mean": results["test"]["mean"], "ci_low": ci.low, "ci_high": ci.high,
                            "n": results["test"]["n"]}
    assert data["lm"]["model"] == results["config"]["lm"]["model"] and data["seed"] == 0 and data["run"] == "."


@pytest.mark.parametrize("name", ["exported.yaml", "exported.json"])
def test_an_export_loads_back_to_the_same_outputs_as_the_run(run, tmp_path, name):
    out = tmp_path / "elsewhere" / name
    assert export(str(run), "--out", str(out)) == 0
    if name.endswith(".json"):
        assert json.loads(out.read_text())["format"] == "optimas-export/1"
    from_run, from_file = optimas.load(run), optimas.load(out)
    assert from_file.config == from_run.config
    inputs = [{k: row[k] for k in from_run.pipeline.system.inputs} for row in retriever_rows()]
    assert from_file(inputs) == from_run(inputs)
    results = read_results(run)
    assert from_file.evaluate(from_file.pipeline.splits.test)["mean"] == results["test"]["mean"]


def test_adapter_folders_are_named_relative_to_the_export(run, tmp_path):
    copied = Path(shutil.copytree(run, tmp_path / "run"))
    adapter = copied / "adapters" / "generator" / "3"
    adapter.mkdir(parents=True)
    best = json.loads((copied / "best_config.json").read_text())
    (copied / "best_config.json").write_text(json.dumps({**best, "generator": "adapters/generator/3"}))
    out = tmp_path / "shared" / "system.yaml"
    assert export(str(copied), "--out", str(out)) == 0
    assert yaml.safe_load(out.read_text())["components"]["generator"] == "../run/adapters/generator/3"
    moved = Path(shutil.copytree(tmp_path, tmp_path.parent / f"{tmp_path.name}-moved"))  # both, elsewhere
    system = optimas.load(moved / "shared" / "system.yaml")
    assert system.config["generator"] == str((moved / "run" / "adapters" / "generator" / "3").resolve())


def test_two_exports_diff_line_by_line(run, tmp_path):
    run = Path(shutil.copytree(run, tmp_path / "toy"))
    assert export(str(run), "--out", str(tmp_path / "a.yaml")) == 0
    assert export(str(run), "--out", str(tmp_path / "again.yaml")) == 0
    assert (tmp_path / "a.yaml").read_text() == (tmp_path / "again.yaml").read_text()  # stable
    other = Path(shutil.copytree(run, tmp_path / "other"))
    best = json.loads((other / "best_config.json").read_text())
    (other / "best_config.json").write_text(json.dumps({**best, "retriever": {"route": "per_input"}}))
    assert export(str(other), "--out", str(tmp_path / "b.yaml")) == 0
    diff = [line for line in difflib.unified_diff((tmp_path / "a.yaml").read_text().splitlines(),
                                                  (tmp_path / "b.yaml").read_text().splitlines(), lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert diff == ["-    route: heuristic", "+    route: per_input", "-run: toy", "+run: other"]


def test_bad_input_is_one_line(run, tmp_path, capsys):
    assert export(str(tmp_path / "nowhere")) == 2
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / "config.yaml").write_text((run / "config.yaml").read_text())
    assert export(str(unfinished)) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0].startswith(f"optimas: {tmp_path / 'nowhere'} is not a folder")
    assert lines[1].startswith(f"optimas: {unfinished} holds no best_config.json") and len(lines) == 2
    (tmp_path / "notes.yaml").write_text("a: 1\n")
    with pytest.raises(UserError, match="is not an optimas export"):
        optimas.load(tmp_path / "notes.yaml")
    (tmp_path / "cut.yaml").write_text("format: optimas-export/1\nseed: 0\n")
    with pytest.raises(UserError, match="lacks part of an export"):
        optimas.load(tmp_path / "cut.yaml")
