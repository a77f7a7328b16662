"""BigCodeBench loader: the real file, the paper's splits, skipping tasks whose libraries are missing."""
from __future__ import annotations

import gzip
import json
import os
import random

import pytest

from optimas_cli.errors import DataError
from optimas_cli.system.pipeline import Splits
from optimas_pipelines.bigcodebench.data import (
    load_tasks,
    missing_libs,
    official_splits,
    parse_libs,
    runnable_splits,
    task_missing_libs,
)

DATA = "/work/shared/data"


@pytest.fixture(scope="module")
def tasks():
    if not os.path.isdir(f"{DATA}/bigcodebench"):
        pytest.skip("the shared BigCodeBench file is not here")
    return load_tasks(DATA)


def test_real_file_has_every_task_with_its_gold_fields(tasks):
    assert len(tasks) == 1140
    first = tasks[0]
    assert first["task_id"] == "BigCodeBench/0" and first["entry_point"] == "task_func"
    assert first["libs"] == ["itertools", "random"]
    assert "class TestCases" in first["test"] and first["question"].startswith("Calculates")


def test_splits_follow_the_official_seed_42_tagging(tasks):
    splits = official_splits(tasks)
    assert splits.sizes() == {"train": 950, "val": 50, "test": 140}
    tags = ["train"] * 1000 + ["test"] * 140
    random.seed(42)  # the official code seeds the global generator
    random.shuffle(tags)
    assert [t["task_id"] for t in splits.test] == [t["task_id"] for t, g in zip(tasks, tags, strict=True) if g == "test"]
    train_val = [t["task_id"] for t, g in zip(tasks, tags, strict=True) if g == "train"]
    assert [t["task_id"] for t in splits.val] == train_val[950:]
    ids = [t["task_id"] for part in (splits.train, splits.val, splits.test) for t in part]
    assert len(set(ids)) == 1140


def test_tasks_with_missing_libraries_are_skipped_and_counted_per_split(tasks):
    def task(i, libs):
        return {**tasks[i], "libs": libs}

    splits = Splits(
        train=[task(0, ["random"]), task(1, ["definitely_not_installed_lib_a"])],
        val=[task(2, ["definitely_not_installed_lib_a", "random"])],
        test=[task(3, ["definitely_not_installed_lib_b"]), task(4, ["collections"])],
    )
    kept, skipped = runnable_splits(splits)
    assert kept.sizes() == {"train": 1, "val": 0, "test": 1}
    assert skipped["train"] == 1 and skipped["val"] == 1 and skipped["test"] == 1 and skipped["total"] == 3
    assert skipped["missing_libraries"] == {"definitely_not_installed_lib_a": 2, "definitely_not_installed_lib_b": 1}


def test_tasks_whose_tests_import_a_missing_library_are_skipped_too(tasks):
    tests = (
        "import unittest\nimport definitely_not_installed_lib_c as c\nfrom os import path\n"
        "class TestCases(unittest.TestCase):\n    def test_a(self):\n"
        "        from definitely_not_installed_lib_d.sub import x\n"
    )
    splits = Splits(train=[{**tasks[0], "libs": ["random"], "test": tests}], val=[], test=[tasks[1]])
    kept, skipped = runnable_splits(splits)
    assert kept.sizes() == {"train": 0, "val": 0, "test": 1}
    assert skipped["missing_libraries"] == {"definitely_not_installed_lib_c": 1, "definitely_not_installed_lib_d": 1}
    # BigCodeBench 258 and 464 list no pytz in `libs`, but their tests import it.
    for number in (258, 464):
        task = tasks[number]
        assert "pytz" not in task["libs"] and "pytz" in task["test"]
        assert ("pytz" in task_missing_libs(task)) == bool(missing_libs(["pytz"]))


def test_missing_libs_knows_stdlib_and_installed_packages():
    assert missing_libs(["os", "random", "numpy"]) == []
    assert missing_libs(["numpy", "no_such_module_here"]) == ["no_such_module_here"]


def test_libs_field_parses_both_shapes_and_rejects_junk():
    assert parse_libs("['random', 'itertools', 'random']") == ["itertools", "random"]
    assert parse_libs(["pandas"]) == ["pandas"]
    with pytest.raises(ValueError):
        parse_libs("['unclosed'")


def test_malformed_row_names_file_and_line(tmp_path):
    folder = tmp_path / "bigcodebench"
    folder.mkdir()
    good = {"task_id": "T/0", "complete_prompt": "", "instruct_prompt": "q", "canonical_solution": "",
            "code_prompt": "def task_func():\n", "test": "", "entry_point": "task_func", "libs": "[]"}
    bad = {**good, "task_id": "T/1", "libs": "not a list("}
    with gzip.open(folder / "BigCodeBench-v0.1.0.jsonl.gz", "wt") as fh:
        fh.write(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(DataError, match=r"BigCodeBench-v0\.1\.0\.jsonl\.gz line 2"):
        load_tasks(tmp_path)


def test_offline_without_the_file_says_what_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DataError, match="bigcodebench/BigCodeBench-v0.1.0.jsonl.gz"):
        load_tasks(tmp_path)
