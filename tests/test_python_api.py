"""The Python entry point: `optimas_cli.api.run` takes the command line's overrides and checks them the
same way; `load` gives back a finished run's optimized system (configuration, LRF routes, adapters)
to call on new inputs. examples/python_api.py runs end to end from a folder outside the repository."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import optimas_cli.api as optimas
from optimas_cli.errors import UserError
from optimas_cli.system import LRF_ROUTE
from optimas_cli.system.results_file import read_results
from optimas_cli.system.traces import PREDICTIONS, read_predictions
from optimas_pipelines.toys.hint import rows as toy_hint_rows
from tests.test_lrf_tiny_backbone import build_tiny_bert

ROOT = Path(__file__).resolve().parent.parent
TINY_LRF = ("lrf.max_length=120", "lrf.min_steps=20")


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    return build_tiny_bert(tmp_path_factory.mktemp("bert"))


@pytest.fixture(scope="module")
def example(tiny_bert, tmp_path_factory) -> tuple[Path, str]:
    """examples/python_api.py as a user runs it: from their own folder, the example's overrides plus a tiny LRF."""
    cwd = tmp_path_factory.mktemp("notebook")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "python_api.py"), f"lrf.backbone={tiny_bert}",
                           *TINY_LRF], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return cwd, proc.stdout


def test_the_example_runs_optimas_and_routes_new_questions(example):
    cwd, stdout = example
    (results_file,) = cwd.glob("outputs/*/*-toy_hint-optimas/results.json")
    results = read_results(results_file.parent)
    assert f"test f1: {results['test']['mean']:.4f}" in stdout
    assert results["best_config"]["hint_generator"] == LRF_ROUTE  # the loop accepted the LRF routes
    assert "N1: routed to the " in stdout and "N2: routed to the " in stdout


def test_a_loaded_system_reproduces_the_runs_test_outputs(example):
    cwd, _ = example
    (folder,) = [p.parent for p in cwd.glob("outputs/*/*-toy_hint-optimas/results.json")]
    results = read_results(folder)
    system = optimas.load(folder)
    assert system.lrf is not None and system.config.to_dict() == results["best_config"]
    traced = [line for line in read_predictions(folder / PREDICTIONS) if line["split"] == "test"]
    assert len(traced) == results["test"]["n"]
    outputs = system([line["input"] for line in traced])  # inputs only: no gold field reaches the system
    assert outputs == [line["output"] for line in traced]  # what the run's own test evaluation produced
    assert system(traced[0]["input"]) == outputs[0]  # one input in, one output out
    rows = {r["query_id"]: r for r in toy_hint_rows()}
    assert system.evaluate([rows[line["key"]] for line in traced])["mean"] == results["test"]["mean"]


def test_an_export_loads_to_the_runs_best_configuration_and_its_outputs(example, tmp_path):
    """`optimas export` to a file outside the run folder, loaded back: the LRF routes find the run's lrf/
    through the file's relative path, and the outputs are the run's own test outputs."""
    from optimas_cli.cli import main

    cwd, _ = example
    (folder,) = [p.parent for p in cwd.glob("outputs/*/*-toy_hint-optimas/results.json")]
    results = read_results(folder)
    out = tmp_path / "deploy" / "hint.yaml"
    assert main(["export", str(folder), "--out", str(out)]) == 0
    system = optimas.load(out)
    assert system.lrf is not None and system.config.to_dict() == results["best_config"]
    traced = [line for line in read_predictions(folder / PREDICTIONS) if line["split"] == "test"]
    assert system([line["input"] for line in traced]) == [line["output"] for line in traced]


def test_run_checks_overrides_as_the_command_line_does(tmp_path):
    with pytest.raises(UserError, match="unknown pipeline 'nope'"):
        optimas.run("pipeline=nope")
    with pytest.raises(UserError, match="runs one experiment, got a sweep: pipeline=toy_hint,toy_retriever"):
        optimas.run("pipeline=toy_hint,toy_retriever")
    with pytest.raises(UserError, match="holds no config.yaml"):
        optimas.load(tmp_path)


def test_run_writes_a_folder_like_the_command_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = optimas.run("pipeline=toy_retriever", "method=unoptimized", "repeats=1")
    assert result.folder.name.endswith("-toy_retriever-unoptimized") and result.test["mean"] == 0.2625
    assert (result.folder / "config.yaml").is_file() and (result.folder / "best_config.json").is_file()
    with pytest.raises(UserError, match=r"input 0: .*missing the system input\(s\) \['question', 'passages'\]"):
        result.load()({"query_id": "Q1"})


def test_adapters_saved_under_the_runs_old_path_are_found_in_the_folder(tmp_path):
    from optimas_cli.flows.evaluate import saved_config
    from optimas_cli.system.run_folder import adapters_found_in
    from optimas_pipelines.toys import retriever

    moved = tmp_path / "copied-run"
    (moved / "adapters" / "session_analyzer" / "2").mkdir(parents=True)
    here = str(moved / "adapters" / "session_analyzer" / "2")
    for saved in ("outputs/2026-12-01/10-00-00-amazon-optimas/adapters/session_analyzer/2",  # relative to where it ran
                  "/work/main/outputs/amazon-cpu/amazon-optimas-s1/adapters/session_analyzer/2"):  # absolute, elsewhere
        found = adapters_found_in({"analyzer": saved, "decider": "an instruction", "selector": None}, moved)
        assert found == {"analyzer": here, "decider": "an instruction", "selector": None}
    # `optimas eval config_file=<moved run>/best_config.json` and optimas.load(<moved run>) read it so
    (moved / "best_config.json").write_text(json.dumps({"retriever": "/gone/run/adapters/session_analyzer/2",
                                                        "generator": "adapters/ in an instruction"}))
    config = saved_config(retriever.build(), moved / "best_config.json")
    assert config["retriever"] == here and config["generator"] == "adapters/ in an instruction"
