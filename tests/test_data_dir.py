"""The shared data is found the same way from an activated venv as under `make` (which sets
$OPTIMAS_DATA_DIR to ../shared/data): with the variable unset, ../shared/data beside the checkout; with no
data anywhere, the one-line error says where it looked and which variable to set."""
from __future__ import annotations

import subprocess

import pytest

from optimas_cli import data_files
from optimas_cli.data_files import DATA_ENV, local_file, missing_data
from tests.cli_runner import CLI, ROOT, cli_env


def test_the_fallback_is_shared_data_beside_the_checkout():
    assert data_files.CHECKOUT_DATA == ROOT.parent / "shared" / "data"


def test_with_the_variable_unset_files_are_found_under_the_checkouts_shared_data(tmp_path, monkeypatch):
    monkeypatch.delenv(DATA_ENV, raising=False)
    shared = tmp_path / "shared" / "data"
    (shared / "pubmedqa").mkdir(parents=True)
    (shared / "pubmedqa" / "ori_pqal.json").write_text("{}")
    monkeypatch.setattr(data_files, "CHECKOUT_DATA", shared)
    assert local_file(None, "pubmedqa", "ori_pqal.json") == shared / "pubmedqa" / "ori_pqal.json"
    monkeypatch.setenv(DATA_ENV, str(tmp_path / "elsewhere"))  # the variable, when set, wins
    assert local_file(None, "pubmedqa", "ori_pqal.json") is None


def test_no_data_anywhere_says_where_it_looked_and_what_to_set(tmp_path, monkeypatch):
    monkeypatch.delenv(DATA_ENV, raising=False)
    monkeypatch.setattr(data_files, "CHECKOUT_DATA", tmp_path / "absent")
    line = str(missing_data("PubMedQA", ("pubmedqa", "ori_pqal.json"), "the hub dataset"))
    assert f"looked in no data directory: data_dir and ${DATA_ENV} unset, and {tmp_path / 'absent'} does not exist" in line
    assert f"set data_dir=<folder> (or ${DATA_ENV})" in line and "\n" not in line
    given = str(missing_data("PubMedQA", ("pubmedqa", "ori_pqal.json"), "the hub dataset", tmp_path / "mine"))
    assert f"(looked in data_dir={tmp_path / 'mine'})" in given


@pytest.mark.skipif(not (ROOT.parent / "shared" / "data" / "pubmedqa").is_dir(), reason="no ../shared/data beside this checkout")
def test_the_cli_reads_the_shared_data_without_the_variable(tmp_path):
    env = {k: v for k, v in cli_env().items() if k != DATA_ENV}
    proc = subprocess.run([*CLI, "plan", "pipeline=pubmedqa", "method=unoptimized", "budget=smoke"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
