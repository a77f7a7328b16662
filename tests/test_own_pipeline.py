"""A user's own pipeline without forking: examples/own_pipeline, copied to a folder outside the
repository, runs through Hydra's own ways (--config-dir, hydra.searchpath, a YAML by path); `optimas
list` shows what they add; override and import errors are one line, the same for `run` and `plan`."""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.cli_runner import optimas

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def project(tmp_path) -> Path:
    """The example as a user would have it: their own folder, nowhere near the optimas checkout."""
    folder = shutil.copytree(ROOT / "examples" / "own_pipeline", tmp_path / "my_project")
    assert ROOT not in folder.parents
    return folder


def test_list_shows_what_each_config_folder_adds(project):
    for extra in (["--config-dir", "conf"], ["hydra.searchpath=[file://conf]"]):
        proc = optimas("list", *extra, cwd=project)
        assert proc.returncode == 0, proc.stderr
        assert f"pipelines    qa_chain  (from {project / 'conf'})" in proc.stdout.splitlines()
    assert "qa_chain" not in optimas("list", cwd=project).stdout


def test_the_example_runs_from_its_own_folder_with_config_dir(project, tiny_model_dir):
    proc = optimas("run", "--config-dir", "conf", "pipeline=qa_chain", "method=unoptimized", "repeats=1",
                   f"lm.model=local/{tiny_model_dir}", "lm.max_tokens=4", cwd=project)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (results,) = project.glob("outputs/*/*-qa_chain-unoptimized/results.json")
    data = json.loads(results.read_text())
    assert (data["pipeline"], data["metric"], data["splits"]) == ("qa_chain", "contains_answer",
                                                                  {"train": 5, "val": 4, "test": 6})
    assert data["ledger"]["calls"] > 0  # both prompt components called the LM


@pytest.mark.parametrize("how", [["hydra.searchpath=[conf]", "pipeline=qa_chain"],
                                 ["pipeline=conf/pipeline/qa_chain.yaml"], ["pipeline=elsewhere.yaml"]])
def test_searchpath_and_a_yaml_by_path_compose_the_pipeline(project, how):
    shutil.copy(project / "conf" / "pipeline" / "qa_chain.yaml", project / "elsewhere.yaml")
    proc = optimas("run", *how, "method=unoptimized", "--cfg", "job", cwd=project)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "_target_: qa_chain.build" in proc.stdout and "questions: questions.jsonl" in proc.stdout


def test_plan_reads_a_pipeline_yaml_by_path(project):
    proc = optimas("plan", "pipeline=conf/pipeline/qa_chain.yaml", "method=unoptimized", cwd=project)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "qa_chain" in proc.stdout and "total" in proc.stdout


def test_an_override_error_keeps_hydras_fix(project):
    proc = optimas("run", "--config-dir", "conf", "pipeline=qa_chain", "pipeline.shuffle=true", cwd=project)
    assert proc.returncode == 2
    assert "To append to your config use +pipeline.shuffle=true" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("command", ["run", "plan"])
def test_an_unimportable_module_is_the_same_one_line_for_run_and_plan(project, command):
    proc = optimas(command, "--config-dir", "conf", "pipeline=qa_chain", "pipeline._target_=qa_chainz.build",
                   "method=unoptimized", cwd=project)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip() == (
        "optimas: cannot import pipeline._target_ 'qa_chainz.build' (ModuleNotFoundError: No module named "
        "'qa_chainz') — run optimas from the folder that holds the module, or add that folder to PYTHONPATH "
        "(see docs/own_pipeline.md)")


def test_a_missing_yaml_or_folder_is_one_line(project):
    proc = optimas("run", "pipeline=nowhere.yaml", cwd=project)
    assert proc.returncode == 2 and proc.stderr.strip().startswith("optimas: pipeline=nowhere.yaml: no such file")
    proc = optimas("run", "--config-dir", "nowhere", cwd=project)
    assert proc.returncode == 2 and "--config-dir 'nowhere' is not a folder" in proc.stderr


def test_the_python_api_takes_the_same_config_dir(project, tiny_model_dir, monkeypatch):
    import optimas_cli.api as optimas

    monkeypatch.chdir(project)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the api puts the project folder on both: undone after
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    result = optimas.run("--config-dir", "conf", "pipeline=qa_chain", "task=eval", "repeats=1",
                         f"lm.model=local/{tiny_model_dir}", "lm.max_tokens=4")
    assert result.folder.name.endswith("-qa_chain-eval") and result.test["n"] == 6
    assert optimas.load(result.folder).components == ["recaller", "answerer"]


def test_a_data_error_inside_build_is_the_same_one_line_for_run_and_plan(tmp_path):
    empty = tmp_path / "no-data"
    empty.mkdir()
    lines = []
    for command in ("run", "plan"):
        proc = optimas(command, "pipeline=pubmedqa", "method=unoptimized", f"data_dir={empty}",
                       f"hydra.run.dir={tmp_path / command}", cwd=tmp_path)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
        lines.append(proc.stderr.strip())
    assert lines[0] == lines[1] and lines[1].startswith("optimas: PubMedQA not found: expected pubmedqa/ori_pqal.json")


@pytest.mark.parametrize("command", ["run", "plan", "eval"])
def test_an_error_raised_in_build_names_its_file_and_line_in_one_line(project, command):
    source = project / "qa_chain.py"
    code = source.read_text()
    line = code.splitlines().index("    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]") + 1
    source.write_text(code.replace("json.loads(line) for line", "json.loads(line)['no_such_field'] for line"))
    proc = optimas(command, "--config-dir", "conf", "pipeline=qa_chain", "method=unoptimized",
                   f"hydra.run.dir={project / 'out'}", cwd=project)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        f"optimas: qa_chain.build() raised KeyError: 'no_such_field' at qa_chain.py:{line} — fix the pipeline's "
        "build() there (see docs/own_pipeline.md)"]
