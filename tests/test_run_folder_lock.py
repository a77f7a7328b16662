"""One writer per run folder (issue 26 item 1): a second process on the same folder, by
hydra.run.dir= or resume=, is refused in one line naming the holder's pid; a lock left by a killed
process is taken over."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from optimas_cli.cli import main
from optimas_cli.errors import UserError
from optimas_cli.system.run_folder import LOCK_FILE, RunFolder, lock_holder

ROOT = Path(__file__).resolve().parent.parent
TOY = ["pipeline=toy_hint", "method=unoptimized"]
HOLD = ("import sys, time; from optimas_cli.system.run_folder import RunFolder; "
        "folder = RunFolder(sys.argv[1]); folder.lock(); print('locked', flush=True); time.sleep(120)")


def holder(folder: Path) -> subprocess.Popen:
    """Another process that holds the folder's lock, as a running `optimas run` does."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout.readline().strip() == "locked"
    return proc


@pytest.fixture
def held(tmp_path):
    folder = tmp_path / "run"
    (folder / "config.yaml").parent.mkdir()
    proc = holder(folder)
    yield folder, proc
    proc.kill()
    proc.wait()


def test_a_second_writer_is_refused_naming_the_holder(held):
    folder, proc = held
    assert lock_holder(folder) == proc.pid
    with pytest.raises(UserError, match=f"in use by another optimas process \\(pid {proc.pid}\\)"):
        RunFolder(folder).lock()


@pytest.mark.parametrize("how", ["hydra.run.dir", "resume"])
def test_a_second_run_on_a_held_folder_is_one_line_and_touches_nothing(held, capsys, how):
    folder, proc = held
    (folder / "config.yaml").write_text("seed: 0\n")  # enough of a run folder for resume= to get to the lock
    before = sorted(p.name for p in folder.rglob("*"))
    assert main(["run", *TOY, f"{how}={folder}"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and f"pid {proc.pid}" in lines[0], lines
    assert sorted(p.name for p in folder.rglob("*")) == before  # Hydra never wrote its .hydra/ there


def test_a_lock_left_by_a_killed_process_is_taken_over(tmp_path):
    folder = tmp_path / "run"
    proc = holder(folder)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert (folder / LOCK_FILE).read_text().strip() == str(proc.pid)  # the stale file is still there
    assert lock_holder(folder) is None
    mine = RunFolder(folder)
    mine.lock()
    assert (folder / LOCK_FILE).read_text().strip() == str(os.getpid())
    mine.unlock()


def test_a_run_releases_its_lock_when_it_ends(tmp_path):
    folder = tmp_path / "run"
    assert main(["run", *TOY, f"hydra.run.dir={folder}"]) == 0
    assert lock_holder(folder) is None
    started = time.time()
    # the same process goes on in it (with another setting: with the same ones the finished run has nothing to do)
    assert main(["run", *TOY, "repeats=2", f"resume={folder}"]) == 0
    assert time.time() - started < 60


def test_report_says_a_run_is_in_progress_or_how_to_continue_it(held):
    """A folder without results.json was listed as "did not finish" while its run was still going."""
    from optimas_cli.report.runs import read_run

    folder, proc = held
    assert f"still in progress (pid {proc.pid})" in read_run(folder).reason
    proc.kill()
    proc.wait()
    reason = read_run(folder).reason
    assert "did not finish" in reason and f"resume={folder}" in reason


def test_report_writes_nothing_into_a_live_run_folder(held, tmp_path, capsys):
    """Issue 47: `optimas report <live folder>` wrote report/ into the folder of a running process."""
    from optimas_cli.report.cli import report_main

    folder, proc = held
    (folder / "config.yaml").write_text("seed: 0\n")  # what a running run has written by then
    before = sorted(p.name for p in folder.iterdir())
    assert report_main([str(folder)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and f"pid {proc.pid}" in lines[0] and "--out" in lines[0], lines
    assert report_main([str(folder), "--out", str(folder / "elsewhere" / "deep")]) == 2  # inside it, at any depth
    assert sorted(p.name for p in folder.iterdir()) == before
    capsys.readouterr()
    assert report_main([str(folder), "--out", str(tmp_path / "report")]) == 1  # elsewhere: written (no run finished)
    assert (tmp_path / "report" / "report.md").is_file()
    assert sorted(p.name for p in folder.iterdir()) == before
