"""results.json and its bulk (optimas_cli/system/results_file.py): what a run writes reads back whole, a folder
written before the split reads as it is, a bulk file that does not belong is one line, and the committed runs
(docs/results, on disk or packed as <folder>.runs.tar.xz) read through the same loader with their summary fields in
results.json."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from optimas_cli.errors import UserError
from optimas_cli.report.run_archive import located
from optimas_cli.report.runs import find_run_folders
from optimas_cli.system.results_file import BULK, RESULTS, read_results, write_results
from optimas_cli.system.run_folder import RunFolder

ROOT = Path(__file__).resolve().parent.parent
ENTRY = {"iteration": 1, "component": "a", "val_before": 1.0, "val_after": 2.0, "accepted": True, "runs_so_far": 3.5,
         "proposal": "Answer briefly.", "gate": {"rule": "strict", "accepted": True, "delta": 0.2}, "note": "",
         "details": {}}
RESULTS_OF_A_RUN = {
    "pipeline": "toy", "method": "optimas", "metric": "accuracy",
    "validation": {"mean": 0.5, "std": 0.0, "scores": [0.5], "n": 2, "per_example": [0.0, 1.0]},
    "test": {"mean": 0.75, "std": 0.0, "scores": [0.75], "n": 4, "per_example": [1.0, 1.0, 0.0, 1.0]},
    "test_initial": {"mean": 0.5, "std": 0.0, "scores": [0.5], "n": 4, "per_example": [1.0, 0.0, 0.0, 1.0]},
    "ledger": {"runs": 12.5, "by_phase": {"validation": {"runs": 2.0}}},
    "plan": {"total": {"runs": 10.0}}, "parse_failures": {"a": {"test": 0.25}}, "best_config": {"a": "Answer briefly."},
    "history": [ENTRY, {**ENTRY, "iteration": 2, "accepted": False, "runs_so_far": 5.0, "proposal": "Think."}],
    "code": {"commit": "abc1234"}, "config": {"seed": 0, "pipeline": {"name": "toy"}},
}


def committed_run_folders() -> list[Path]:
    """Where the files of every committed run lie (a packed run's: its archive's unpacked copy)."""
    return [located(folder) for folder in find_run_folders([str(ROOT / "docs" / "results")])]


def written(tmp_path: Path, results: dict) -> Path:
    write_results(RunFolder(tmp_path), results)
    return tmp_path


def test_a_run_reads_back_whole_with_its_summary_in_results_json(tmp_path):
    folder = written(tmp_path, RESULTS_OF_A_RUN)
    assert read_results(folder) == RESULTS_OF_A_RUN
    summary = json.loads((folder / RESULTS).read_text())
    assert summary["test"] == {"mean": 0.75, "std": 0.0, "scores": [0.75], "n": 4}  # no per_example
    assert summary["history"] == [{"accepted": True, "runs_so_far": 3.5}, {"accepted": False, "runs_so_far": 5.0}]
    assert summary["ledger"] == RESULTS_OF_A_RUN["ledger"] and summary["code"] == {"commit": "abc1234"}
    assert not {"plan", "parse_failures", "best_config"} & summary.keys()
    bulk = json.loads(gzip.decompress((folder / BULK).read_bytes()))
    assert bulk["history"][1]["proposal"] == "Think." and bulk["test"] == {"per_example": [1.0, 1.0, 0.0, 1.0]}


def test_the_same_results_write_the_same_bytes(tmp_path):
    a, b = written(tmp_path / "a", RESULTS_OF_A_RUN), written(tmp_path / "b", RESULTS_OF_A_RUN)
    assert [(a / n).read_bytes() for n in (RESULTS, BULK)] == [(b / n).read_bytes() for n in (RESULTS, BULK)]


def test_a_folder_written_before_the_split_reads_as_it_is(tmp_path):
    (tmp_path / RESULTS).write_text(json.dumps(RESULTS_OF_A_RUN, indent=2))
    assert read_results(tmp_path) == RESULTS_OF_A_RUN
    assert read_results(tmp_path / "none") is None


def test_results_with_nothing_to_split_off_leave_no_bulk_file(tmp_path):
    written(tmp_path, RESULTS_OF_A_RUN)
    small = {"pipeline": "toy", "method": "collect", "ledger": {"runs": 1.0}}
    write_results(RunFolder(tmp_path), small)  # a rewrite: the earlier bulk file is stale now
    assert not (tmp_path / BULK).exists() and read_results(tmp_path) == small


def test_a_bulk_file_from_another_write_is_refused(tmp_path):
    folder = written(tmp_path / "run", RESULTS_OF_A_RUN)
    other = written(tmp_path / "other", {**RESULTS_OF_A_RUN, "plan": {"total": {"runs": 99.0}}})
    (folder / BULK).write_bytes((other / BULK).read_bytes())
    with pytest.raises(UserError, match="is not the file .*results.json was written with"):
        read_results(folder)


@pytest.mark.parametrize("damage, message", [
    (lambda p: p.unlink(), "is missing: results.json names it"),
    (lambda p: p.write_bytes(b"not gzip"), "is not the file"),
])
def test_a_missing_or_damaged_bulk_file_is_one_line(tmp_path, damage, message):
    folder = written(tmp_path, RESULTS_OF_A_RUN)
    damage(folder / BULK)
    with pytest.raises(UserError, match=message):
        read_results(folder)


def test_a_results_json_cut_short_is_one_line(tmp_path):
    folder = written(tmp_path, RESULTS_OF_A_RUN)
    (folder / RESULTS).write_text((folder / RESULTS).read_text()[:-40])
    with pytest.raises(UserError, match="is not valid JSON"):
        read_results(folder)


def test_committed_runs_read_whole_and_keep_their_summary_in_results_json():
    """The benchmark's tables read results.json's summary fields as they are (scripts/synthetic_benchmark.py);
    the rest of each committed run comes back through the loader."""
    folders = [f for f in committed_run_folders() if (f / RESULTS).exists()]
    assert len(folders) >= 400, len(folders)  # the phase map's 342 among them, read from their archives
    for folder in folders:
        results = read_results(folder)
        summary = json.loads((folder / RESULTS).read_text())
        assert {"pipeline", "method", "ledger"} <= summary.keys(), folder
        history = results.get("history") or []
        assert [{k: e[k] for k in ("accepted", "runs_so_far") if k in e} for e in history] == \
            [{k: e[k] for k in ("accepted", "runs_so_far") if k in e} for e in summary.get("history") or []], folder
        if "test" in results and "per_example" in results["test"]:
            assert len(results["test"]["per_example"]) == results["test"]["n"], folder
