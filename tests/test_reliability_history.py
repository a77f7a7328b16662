"""A damaged `history` in results.json (issue 47: a string was a 20-line AttributeError in `optimas report`):
every shape is one reason naming what is wrong, and the run is listed as left out; the histories real runs
wrote (docs/results) all pass."""
from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from optimas_cli.cli import main
from optimas_cli.optim.history import history_problem
from optimas_cli.system.results_file import read_results
from tests.test_results_file import committed_run_folders

ROOT = Path(__file__).resolve().parent.parent
ENTRY = {"iteration": 1, "component": "a", "val_before": 1.0, "val_after": 2.0, "accepted": True, "runs_so_far": 3.0,
         "n": 4, "val_candidate": 2.0, "gate": {"rule": "strict", "alpha": 0.1, "accepted": True, "delta": 0.25,
                                                "ci_low": 0.1, "ci_high": 0.4, "n": 4}}
DAMAGE = {
    "a string": ("abc", "history is 'abc', not a list"),
    "a dict": ({"iteration": 1}, "history is {'iteration': 1}, not a list"),
    "a list of numbers": ([1, 2], "history[0] is 1, not an iteration entry"),
    "a list of strings": (["x"], "history[0] is 'x', not an iteration entry"),
    "an entry missing keys": ([{"component": "a"}], "history[0] lacks iteration, accepted"),
    "an entry missing accepted": ([{"iteration": 1}], "history[0] lacks accepted"),
    "val_after as text": ([{**ENTRY, "val_after": "high"}], "history[0].val_after is 'high', not of type int or float"),
    "accepted as a number": ([ENTRY, {**ENTRY, "accepted": 1}], "history[1].accepted is 1, not of type bool"),
    "iteration as a bool": ([{**ENTRY, "iteration": True}], "history[0].iteration is True, not of type int"),
    "n as text": ([{**ENTRY, "n": "4"}], "history[0].n is '4', not of type int"),
    "runs_so_far as a list": ([{**ENTRY, "runs_so_far": [1]}], "history[0].runs_so_far is [1], not of type int or float"),
    "gate as a list": ([{**ENTRY, "gate": [1]}], "history[0].gate is [1], not of type dict"),
    "gate without delta": ([{**ENTRY, "gate": {**ENTRY["gate"], "delta": None}}], "history[0].gate.delta is None"),
    "gate missing rule": ([{**ENTRY, "gate": {k: v for k, v in ENTRY["gate"].items() if k != "rule"}}],
                          "history[0].gate.rule is missing"),
}


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("finished") / "run"
    assert main(["run", "pipeline=toy_hint", "method=unoptimized", f"hydra.run.dir={folder}"]) == 0
    return folder


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_report_on_a_damaged_history_leaves_the_run_out_with_one_reason(finished, tmp_path, capsys, kind):
    history, reason = DAMAGE[kind]
    folder = tmp_path / "run"
    shutil.copytree(finished, folder)
    results = read_results(folder)  # written back whole, as a folder from before results.bulk.json.gz holds it
    (folder / "results.json").write_text(json.dumps({**results, "history": history}))
    assert main(["report", str(folder), "--out", str(tmp_path / "report")]) == 1  # no run to report, no traceback
    assert "Traceback" not in capsys.readouterr().err
    with open(tmp_path / "report" / "runs.csv") as handle:
        (row,) = list(csv.DictReader(handle))
    assert row["status"] == "left out" and row["reason"].startswith(f"results.json: {reason}"), row["reason"]
    assert "\n" not in row["reason"]


def test_a_sound_history_passes():
    assert history_problem([ENTRY, {**ENTRY, "gate": None, "val_candidate": None, "iteration": 2}]) is None
    assert history_problem([]) is None


def test_every_history_real_runs_wrote_passes():
    found = [(path, results) for path in committed_run_folders() if (results := read_results(path)) is not None]
    histories = {path: results["history"] for path, results in found if results.get("history")}
    assert histories  # the check would prove nothing without them
    assert {path: history_problem(h) for path, h in histories.items() if history_problem(h)} == {}
