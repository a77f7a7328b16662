"""A folder that holds a run is continued only by `resume=` naming it: a new run there (hydra.run.dir=, the API's
folder=, a sweep's hydra.sweep.dir=) is one line, exit 2, every file left as it was. Before, `hydra.run.dir=<a finished
run> seed=1` went on from the seed-0 run's Stage 1 and loop and wrote a results.json labelled seed 1 (config.yaml
still said seed 0), method=global_reward there was a 40-line traceback, and the same settings rewrote results.json."""
from __future__ import annotations

import shutil

import pytest

import optimas_cli.api as optimas
from optimas_cli.cli import main
from optimas_cli.errors import UserError

TOY = ["pipeline=toy_retriever", "method=unoptimized", "repeats=1"]


def snapshot(folder):
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(folder.rglob("*"))
            if p.is_file()}


def refused(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    folder = tmp_path_factory.mktemp("reuse") / "run"
    assert main(["run", *TOY, f"hydra.run.dir={folder}"]) == 0
    return folder


@pytest.mark.parametrize("command, overrides", [
    ("run", []), ("run", ["seed=1"]), ("run", ["method=global_reward", "budget=smoke"]), ("collect", []),
])
def test_a_new_run_in_a_folder_that_holds_one_is_refused_and_touches_nothing(finished, capsys, command, overrides):
    before = snapshot(finished)
    assert main([command, *TOY, *overrides, f"hydra.run.dir={finished}"]) == 2
    assert refused(capsys) == (f"optimas: {finished} already holds a run of pipeline toy_retriever, method unoptimized, "
                               f"seed 0 — continue it with resume={finished}, or choose another hydra.run.dir")
    assert snapshot(finished) == before


def test_the_api_refuses_a_folder_that_holds_a_run(finished):
    before = snapshot(finished)
    with pytest.raises(UserError, match="already holds a run .* or choose another folder="):
        optimas.run(*TOY, folder=finished)
    assert snapshot(finished) == before


def test_a_sweep_into_a_folder_that_holds_its_runs_is_refused(finished, tmp_path, capsys):
    sweep = tmp_path / "sweep"
    shutil.copytree(finished, sweep / "0-toy_retriever-unoptimized")
    before = snapshot(sweep)
    assert main(["run", "-m", *TOY, "seed=0,1", f"hydra.sweep.dir={sweep}"]) == 2
    line = refused(capsys)
    assert f"{sweep} already holds the runs of a sweep (0-toy_retriever-unoptimized)" in line
    assert "choose another hydra.sweep.dir" in line
    assert snapshot(sweep) == before


def test_a_folder_named_by_an_interpolation_is_refused_before_the_run_writes(finished, monkeypatch, capsys):
    """The command line cannot read such a folder's name (nor a default folder's, named after the second it
    starts): the job refuses it before writing, though Hydra has written its .hydra/ files there by then."""
    monkeypatch.setenv("OPTIMAS_REUSED", str(finished))
    before = {name: seen for name, seen in snapshot(finished).items() if not name.startswith(".hydra")}
    with pytest.raises(SystemExit) as stop:
        main(["run", *TOY, "hydra.run.dir=${oc.env:OPTIMAS_REUSED}"])
    assert stop.value.code == 2
    assert "already holds a run of pipeline toy_retriever" in refused(capsys)
    assert {name: seen for name, seen in snapshot(finished).items() if not name.startswith(".hydra")} == before


def test_a_run_that_failed_before_it_started_runs_again_in_its_folder(tmp_path, capsys, monkeypatch):
    """Its folder holds nothing to continue (the report says: run its command again), and the config.yaml there is
    the new run's, the one a later resume= is checked against. (Missing data is refused before a folder exists:
    with that check off, it stops the run inside its folder, as any error at its start does.)"""
    monkeypatch.setattr("optimas_cli.flows.setup.refuse_unfit", lambda *args, **kwargs: None)
    folder = tmp_path / "run"
    (tmp_path / "no-data").mkdir()
    failing = ["run", "pipeline=pubmedqa", "method=unoptimized", f"data_dir={tmp_path / 'no-data'}",
               f"hydra.run.dir={folder}"]
    for seed in (0, 3):  # the second time too it stops on its data, not on its folder
        with pytest.raises(SystemExit):
            main([*failing, f"seed={seed}"])
        assert "PubMedQA not found" in refused(capsys)
    assert "seed: 3" in (folder / "config.yaml").read_text() and not (folder / "config.resumed.yaml").exists()
