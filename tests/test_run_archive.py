"""Run folders packed as `<folder>.runs.tar.xz` (optimas_cli/report/run_archive.py) read as the folder: the same
runs under the same names, the same report; a member that would land outside the folder, a damaged archive, or a
folder that is also packed is one line; nothing is written into an archive (regret.json stays unwritten)."""
from __future__ import annotations

import io
import os
import re
import shutil
import tarfile
from pathlib import Path

import pytest

from optimas_cli.errors import UserError
from optimas_cli.report import regret, show
from optimas_cli.report.cli import write_report
from optimas_cli.report.run_archive import SUFFIX, located, pack, unpacked
from optimas_cli.report.runs import find_run_folders, load_runs
from tests.test_report_pooling import write_run

ROOT = Path(__file__).resolve().parents[1]


def packed(folder: Path) -> Path:
    archive = pack(folder)
    shutil.rmtree(folder)
    return archive


def runs_of(tmp_path: Path) -> Path:
    """Two sweeps that both ran seed 0 (the newer counts), a seed 1 and a baseline, under runs/."""
    write_run(tmp_path / "runs" / "a" / "optimas-s0", seed=0, scores=[0.0, 1.0, 1.0], when=1000.0)
    write_run(tmp_path / "runs" / "b" / "optimas-s0", seed=0, scores=[1.0, 1.0, 1.0], when=2000.0)
    write_run(tmp_path / "runs" / "a" / "optimas-s1", seed=1, scores=[1.0, 0.0, 1.0], when=1500.0)
    write_run(tmp_path / "runs" / "a" / "unoptimized-s0", seed=0, scores=[0.0, 0.0, 1.0], method="unoptimized")
    return tmp_path / "runs"


def test_a_packed_folder_reports_as_the_folder_did_under_the_same_names(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runs_of(tmp_path)
    before = write_report(load_runs(["runs"]), Path("before"))
    folders = find_run_folders(["runs"])
    archive = packed(Path("runs"))
    assert archive == Path("runs" + SUFFIX) and not Path("runs").exists()

    after = write_report(load_runs(["runs"]), Path("after"))
    assert after == before  # the newest duplicate is the same: the archive keeps the files' times
    for name in ("runs.csv", "table2.csv", "table3.csv"):
        assert (Path("after") / name).read_text() == (Path("before") / name).read_text()
    assert find_run_folders(["runs"]) == find_run_folders([str(archive)]) == find_run_folders(["."]) == folders
    assert find_run_folders(["runs/a/optimas-s1"]) == [Path("runs/a/optimas-s1")]
    assert located(Path("runs/b")) == unpacked(archive) / "b"


def test_a_folder_tarred_by_hand_reads_the_same(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runs_of(tmp_path)
    folders = find_run_folders(["runs"])
    with tarfile.open("runs" + SUFFIX, "w:xz") as tar:  # tar -cJf runs.runs.tar.xz runs
        tar.add("runs")
    shutil.rmtree("runs")
    assert find_run_folders(["runs"]) == folders


@pytest.mark.parametrize("member, kind", [("../outside/results.json", tarfile.REGTYPE), ("sweep/link", tarfile.SYMTYPE),
                                          ("other/results.json", tarfile.REGTYPE)])
def test_a_member_outside_the_folder_it_packs_is_refused_in_one_line(tmp_path, member, kind):
    archive = tmp_path / "runs" / f"sweep{SUFFIX}"
    archive.parent.mkdir()
    with tarfile.open(archive, "w:xz") as tar:
        info = tarfile.TarInfo(member)
        info.type, info.linkname, info.size = kind, "/etc", 0 if kind == tarfile.SYMTYPE else 2
        tar.addfile(info, io.BytesIO(b"{}"))
    with pytest.raises(UserError, match=re.escape(f"sweep{SUFFIX} holds '{member}', which points outside the "
                                                  "folder sweep/ it packs")) as err:
        load_runs([str(tmp_path / "runs")])
    assert "\n" not in str(err.value) and not (tmp_path / "runs" / "outside").exists()


def test_a_damaged_archive_and_a_folder_packed_twice_are_one_line(tmp_path):
    archive = pack(runs_of(tmp_path))
    for named in (tmp_path, tmp_path / "runs"):  # found below a folder, or named itself
        with pytest.raises(UserError, match=r"runs is both a folder and packed \(runs\.runs\.tar\.xz\)"):
            load_runs([str(named)])

    shutil.rmtree(tmp_path / "runs")
    archive.write_bytes(archive.read_bytes()[:200])
    with pytest.raises(UserError, match=r"runs\.runs\.tar\.xz is damaged") as err:
        load_runs([str(tmp_path / "runs")])
    assert "\n" not in str(err.value)


def test_a_regret_measured_from_an_archive_is_written_nowhere(tmp_path, monkeypatch):
    folder = tmp_path / "cell" / "s0" / "tpe"
    folder.mkdir(parents=True)
    (folder / regret.TRACES).write_bytes(b"")
    archive = packed(tmp_path / "cell")
    monkeypatch.setattr(regret, "measure", lambda where, results: {"regret": 0.25, "measured_in": str(where)})
    got = regret.measured(folder, {})
    assert got == {"regret": 0.25, "measured_in": str(unpacked(archive) / "s0" / "tpe")}
    assert not (unpacked(archive) / "s0" / "tpe" / regret.MEASURED).exists() and not folder.exists()


def test_show_reads_a_run_inside_an_archive(tmp_path, monkeypatch):
    source = located(ROOT / "docs" / "results" / "hotpotqa-gates" / "runs" / "unoptimized")
    shutil.copytree(source, tmp_path / "runs" / "unoptimized")
    packed(tmp_path / "runs")
    monkeypatch.chdir(tmp_path)
    run = show.load(os.path.join("runs", "unoptimized"), "test")
    assert run.folder == Path("runs/unoptimized") and len(run.examples) == run.results["test"]["n"] == 50
