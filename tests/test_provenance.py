"""Every run records the code it ran (results.json `code`): the commit and dirty flag of the checkout
optimas_cli is imported from, else the installed version; trackers log it, and `optimas report` says
when a table pools runs of different code."""
from __future__ import annotations

import json
import shutil
import subprocess
from importlib.metadata import version
from pathlib import Path

import pytest

from optimas_cli.cli import main as cli_main
from optimas_cli.provenance import describe
from optimas_cli.system.results_file import read_results
from optimas_cli.tracking.record import RunRecord
from tests.cli_runner import ROOT, optimas

A, B = "a" * 40, "b" * 40


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false",
                           *args], cwd=repo, check=True, capture_output=True, text=True)
    return done.stdout.strip()


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("provenance")
    proc = optimas("run", "pipeline=toy_hint", "method=unoptimized", "repeats=1", f"hydra.run.dir={root / 'run'}",
                   cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root / "run"


def test_a_run_records_the_commit_it_ran_and_the_tracker_and_show_name_it(run, capsys):
    code = read_results(run)["code"]
    if (ROOT / ".git").exists():
        assert code["commit"] == git(ROOT, "rev-parse", "HEAD") and isinstance(code["dirty"], bool)
    else:  # a source tree without its history: the version is all there is
        assert code["commit"] is None and code["version"] == version("optimas")
    tags = RunRecord.read(run).tags
    assert tags.get("code.commit") == code["commit"] and tags.get("code.dirty") == (
        None if code["dirty"] is None else str(code["dirty"]))
    assert cli_main(["show", str(run)]) == 0
    if code["commit"]:
        assert f"code {code['commit'][:7]}" in capsys.readouterr().out


def test_mlflow_tags_the_run_with_its_commit(run, tmp_path):
    pytest.importorskip("mlflow")
    from optimas_cli.tracking.trackers import MLflowTracker

    folder = shutil.copytree(run, tmp_path / "run")
    results = read_results(folder)
    (folder / "results.json").write_text(json.dumps({**results, "code": {"commit": A, "dirty": True, "version": "0.1.0"}}))
    tracker = MLflowTracker({"uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "experiment": "t",
                             "artifact_location": str(tmp_path / "artifacts")})
    tags = tracker.mlflow.MlflowClient().get_run(tracker.log(RunRecord.read(folder), parent=None)).data.tags
    assert (tags["code.commit"], tags["code.dirty"], tags["mlflow.source.git.commit"]) == (A, "True", A)


def test_uncommitted_changes_to_tracked_files_make_the_checkout_dirty(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("x = 1\n")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "pkg/__init__.py")
    git(tmp_path, "commit", "-q", "-m", "first")
    head = git(tmp_path, "rev-parse", "HEAD")
    (package / "notes.txt").write_text("untracked files are not the code that ran")
    assert describe(package) == {"commit": head, "dirty": False, "version": version("optimas")}
    (package / "__init__.py").write_text("x = 2\n")
    assert describe(package) == {"commit": head, "dirty": True, "version": version("optimas")}


def test_without_a_checkout_or_without_git_the_record_is_the_version(tmp_path, monkeypatch):
    package = tmp_path / "site-packages" / "pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    version_only = {"commit": None, "dirty": None, "version": version("optimas")}
    assert describe(package) == version_only
    git(tmp_path, "init", "-q")  # a wheel inside another project's checkout is not that project's code
    (tmp_path / "own.py").write_text("")
    git(tmp_path, "add", "own.py")
    git(tmp_path, "commit", "-q", "-m", "theirs")
    assert describe(package) == version_only
    git(tmp_path, "add", "site-packages")
    git(tmp_path, "commit", "-q", "-m", "ours")
    assert describe(package)["commit"] is not None
    monkeypatch.setenv("PATH", str(tmp_path / "no-git-here"))
    assert describe(package) == version_only


def report_of(run: Path, tmp_path: Path, codes: list[dict | None]) -> tuple[str, str]:
    """Table 2's section of report.md and runs.csv, for copies of `run` (one seed each) with these code records."""
    results = read_results(run)
    for seed, code in enumerate(codes):
        copy = {**results, "config": {**results["config"], "seed": seed}}
        copy.pop("code")
        if code is not None:
            copy["code"] = code
        (tmp_path / "runs" / f"seed{seed}").mkdir(parents=True)
        (tmp_path / "runs" / f"seed{seed}" / "results.json").write_text(json.dumps(copy))
    assert cli_main(["report", str(tmp_path / "runs"), "--out", str(tmp_path / "report")]) == 0
    text = (tmp_path / "report" / "report.md").read_text()
    return text.split("### Table 2 · test score")[1].split("### ")[0], (tmp_path / "report" / "runs.csv").read_text()


def test_a_table_pooling_runs_of_different_code_says_so(run, tmp_path):
    table, runs_csv = report_of(run, tmp_path, [{"commit": A, "dirty": False}, {"commit": A, "dirty": False},
                                                {"commit": B, "dirty": True}, None])
    assert ("Code: rows come from 2 code versions: aaaaaaa (2 runs), bbbbbbb dirty (1 run); 1 run records no "
            "commit") in table
    assert "bbbbbbb dirty" in runs_csv


@pytest.mark.parametrize("code", [{"commit": A, "dirty": False}, {"commit": None, "dirty": None, "version": "0.1.0"}])
def test_runs_of_one_clean_commit_or_one_version_get_no_note(run, tmp_path, code):
    table, _ = report_of(run, tmp_path, [code, code])
    assert "| toy_hint |" in table and "Code:" not in table
