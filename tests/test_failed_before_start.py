"""A run that failed before it started (missing data, a broken build()) holds no work: `optimas report`
and `optimas show` name its error and say to run it again, not to resume it; a killed run is still
offered `resume=`."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from optimas_cli.cli import main
from optimas_cli.report.runs import read_run
from tests.cli_runner import optimas


@pytest.fixture(scope="module")
def failed(tmp_path_factory) -> Path:
    """A real `optimas run` that stopped on missing data before doing any work. Missing data is refused before
    a folder exists (the run's pipeline is built first, flows/setup.refuse_unfit); with that check off, the
    same error stops the run inside its folder, as any error at its start does."""
    tmp = tmp_path_factory.mktemp("failed")
    (tmp / "no-data").mkdir()
    folder = tmp / "run"
    args = ["run", "pipeline=pubmedqa", "method=unoptimized", f"data_dir={tmp / 'no-data'}", f"hydra.run.dir={folder}"]
    proc = optimas(*args, cwd=tmp)
    assert proc.returncode == 2 and "PubMedQA not found" in proc.stderr and not folder.exists(), proc.stderr[-2000:]
    with pytest.MonkeyPatch.context() as patch, pytest.raises(SystemExit) as stop:
        patch.setattr("optimas_cli.flows.setup.refuse_unfit", lambda *args, **kwargs: None)
        main(args)
    assert stop.value.code == 2 and (folder / "optimas.log").exists()
    return folder


def test_report_does_not_offer_to_resume_a_run_that_failed_before_it_started(failed):
    reason = read_run(failed).reason
    assert reason.startswith("the run failed before it started: PubMedQA not found"), reason
    assert reason.endswith("fix that and run its command again") and "resume=" not in reason


def test_show_names_the_error_of_a_run_that_failed_before_it_started(failed, capsys):
    assert main(["show", str(failed)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "the run failed before it started: PubMedQA not found" in lines[0], lines
    assert "resume=" not in lines[0]


def test_a_run_that_started_is_still_offered_resume(failed, tmp_path):
    started = Path(shutil.copytree(failed, tmp_path / "started"))
    (started / "accounts.json").write_text("{}")  # a checkpoint: work to continue from
    assert f"resume={started}" in read_run(started).reason
