"""`optimas eval`: a saved configuration scored on the examples of one data file (one key), with no
train or validation split needed, in a folder named for eval, reported in a table of its own."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from optimas_cli.report.cli import write_report
from optimas_cli.report.runs import load_runs
from optimas_cli.system.results_file import read_results
from optimas_pipelines.toys.hint import rows as toy_hint_rows
from tests.cli_runner import optimas


def only_folder(root: Path) -> Path:
    (folder,) = [p.parent for p in root.glob("outputs/*/*/results.json")]
    return folder


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory) -> Path:
    """toy_hint's 'always the long hint' configuration scored on a file holding two of its questions."""
    root = tmp_path_factory.mktemp("eval")
    (root / "long.json").write_text(json.dumps({"hint_generator": "long", "answer_generator": None}))
    q1, *_, q5 = toy_hint_rows()
    (root / "two.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (q1, q5)))
    proc = optimas("eval", "pipeline=toy_hint", "config_file=long.json", "eval_file=two.jsonl", "repeats=1", cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root


def test_eval_scores_every_example_of_the_file_with_the_saved_configuration(evaluated):
    folder = only_folder(evaluated)
    assert folder.name.endswith("-toy_hint-eval")  # not -optimas, the default method's name
    results = read_results(folder)
    assert results["method"] == "eval" and results["test"]["n"] == 2
    assert results["test"]["per_example"] == [0.92, 0.60]  # Q1 and Q5 with the long hint (the chapter's F1)
    assert results["evaluated"] == {"config_file": "long.json", "eval_file": "two.jsonl", "lrf_dir": None}


def test_the_report_puts_eval_runs_in_their_own_table(evaluated, tmp_path):
    proc = optimas("run", "pipeline=toy_hint", "method=unoptimized", "repeats=1", cwd=evaluated)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = write_report(load_runs([str(evaluated / "outputs")]), tmp_path / "report")
    with (tmp_path / "report" / "table2.csv").open() as handle:
        assert [r["method"] for r in csv.DictReader(handle)] == ["unoptimized"]  # the eval run is not beside it
    with (tmp_path / "report" / "evaluations.csv").open() as handle:
        (row,) = list(csv.DictReader(handle))
    assert (row["config_file"], row["eval_file"], row["n"], float(row["mean"])) == ("long.json", "two.jsonl", "2", 0.76)
    assert "### Evaluations" in text and "| toy_hint | long.json | two.jsonl | f1 | 2 | 0.7600 |" in text


def test_eval_needs_no_train_or_validation_split(tmp_path):
    (tmp_path / "test_only.py").write_text(
        "from optimas_pipelines.toys.hint import build as toy\n"
        "def build(data_dir=None, **_):\n"
        "    pipeline = toy()\n"
        "    pipeline.splits.train, pipeline.splits.val = [], []\n"
        "    return pipeline\n")
    proc = optimas("eval", "pipeline=toy_hint", "pipeline._target_=test_only.build", "repeats=1", cwd=tmp_path,
                   pythonpath=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert read_results(only_folder(tmp_path))["test"]["n"] == 5


@pytest.mark.parametrize(("files", "args", "expected"), [
    ({"bad.jsonl": '{"query_id": "Q1"}\n'}, ["eval_file=bad.jsonl"],
     "malformed row in bad.jsonl line 1: \"missing the system input(s) ['question', 'hints']"),
    ({}, ["eval_file=nowhere.jsonl"], "eval_file nowhere.jsonl does not exist"),
    ({"other.json": '{"retriever": 5}'}, ["config_file=other.json"],
     "config_file other.json does not fit pipeline 'toy_hint' (unknown components ['retriever']"),
    ({"routed.json": '{"hint_generator": {"route": "lrf"}, "answer_generator": null}'}, ["config_file=routed.json"],
     "the configuration routes by the local reward, and lrf holds no reward model"),
])
def test_bad_eval_input_is_one_line(tmp_path, files, args, expected):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    proc = optimas("eval", "pipeline=toy_hint", *args, cwd=tmp_path)
    assert proc.returncode == 2
    assert expected in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]
