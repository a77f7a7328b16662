"""BigCodeBench tasks and the paper's splits: 950 train / 50 validation / 140 test.

The official Optimas code tags the 1,140 tasks with a list of 1,000 'train' and 140 'test' tags
shuffled by random.seed(42), then keeps the last 5% of train as validation. Tasks whose
third-party libraries (field `libs`, and whatever the task's unit tests import) are not importable
here are then dropped from each split and counted, so a missing library is never scored as the
model's failure.
"""
from __future__ import annotations

import ast
import functools
import importlib.util
import os
import random
from collections import Counter
from pathlib import Path

from optimas_cli.data_files import local_file, missing_data, read_jsonl, require_fields
from optimas_cli.errors import DataError
from optimas_cli.system.pipeline import Splits

FOLDER = "bigcodebench"
DATA_FILE = "BigCodeBench-v0.1.0.jsonl.gz"
HUB_DATASET, HUB_SPLIT = "bigcode/bigcodebench", "v0.1.3"
FIELDS = ("task_id", "complete_prompt", "instruct_prompt", "canonical_solution", "code_prompt", "test",
          "entry_point", "libs")
TRAIN_TAGS, SEED, VALIDATION_FRACTION = 1000, 42, 0.05


def parse_libs(value) -> list[str]:
    """The `libs` field: a Python-literal list in the files ("['pandas', 'random']"), a list on the hub."""
    try:
        libs = ast.literal_eval(value) if isinstance(value, str) else value
    except (SyntaxError, ValueError):
        raise ValueError(f"libs is {value!r}, expected a list of module names") from None
    if not isinstance(libs, list | tuple) or not all(isinstance(lib, str) for lib in libs):
        raise ValueError(f"libs is {value!r}, expected a list of module names")
    return sorted(set(libs))


def to_example(row: dict) -> dict:
    """A task as the pipeline sees it: system inputs plus the gold fields the metric and checks use."""
    require_fields(row, FIELDS)
    for name in FIELDS[:-1]:
        if not isinstance(row[name], str):
            raise ValueError(f"field {name!r} is not text")
    return {
        "task_id": row["task_id"],
        "question": row["instruct_prompt"],
        "code_prompt": row["code_prompt"],
        "complete_prompt": row["complete_prompt"],
        "entry_point": row["entry_point"],
        "test": row["test"],
        "canonical_solution": row["canonical_solution"],
        "libs": parse_libs(row["libs"]),
    }


def load_tasks(data_dir: str | os.PathLike | None = None) -> list[dict]:
    """All tasks in file order: the local file when present, else the hub dataset."""
    path = local_file(data_dir, FOLDER, DATA_FILE)
    if path is None:
        return _hub_tasks(data_dir)
    return _read_local(path)


def _read_local(path: Path) -> list[dict]:
    # validate= reports a malformed row with its file and line; converting again cannot fail then.
    return [to_example(row) for row in read_jsonl(path, validate=to_example)]


def _hub_tasks(data_dir) -> list[dict]:
    try:
        import datasets

        table = datasets.load_dataset(HUB_DATASET, split=HUB_SPLIT)
    except Exception as exc:  # offline, or the hub is unreachable: say what to provide instead
        raise missing_data("BigCodeBench", (FOLDER, DATA_FILE), f"the hub dataset {HUB_DATASET} ({HUB_SPLIT})", data_dir) from exc
    examples = []
    for i, row in enumerate(table):
        try:
            examples.append(to_example(dict(row)))
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"malformed row {i} of hub dataset {HUB_DATASET}: {exc}") from None
    return examples


def official_splits(tasks: list[dict]) -> Splits:
    """The Optimas repository's recipe, before any task is skipped."""
    if len(tasks) <= TRAIN_TAGS:
        raise DataError(
            f"BigCodeBench has {len(tasks)} tasks; the paper's split needs more than {TRAIN_TAGS}",
            "use the full BigCodeBench release (1,140 tasks)",
        )
    tags = ["train"] * TRAIN_TAGS + ["test"] * (len(tasks) - TRAIN_TAGS)
    random.Random(SEED).shuffle(tags)  # identical to random.seed(42); random.shuffle(tags)
    train_val = [t for t, tag in zip(tasks, tags, strict=True) if tag == "train"]
    test = [t for t, tag in zip(tasks, tags, strict=True) if tag == "test"]
    cut = int(len(train_val) * (1 - VALIDATION_FRACTION))
    return Splits(train=train_val[:cut], val=train_val[cut:], test=test)


def missing_libs(libs: list[str]) -> list[str]:
    """The modules among `libs` that cannot be imported here (the sandbox uses this interpreter)."""
    missing = []
    for lib in libs:
        try:
            found = importlib.util.find_spec(lib) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(lib)
    return missing


@functools.lru_cache(maxsize=None)  # every build of the pipeline reads all 1,140 tests (a plan, a sweep's jobs)
def test_imports(test_source: str) -> tuple[str, ...]:
    """Top-level modules the unit tests import (some import libraries the task's `libs` omit: pytz)."""
    try:
        tree = ast.parse(test_source)
    except (SyntaxError, ValueError):
        return ()  # the run reports the syntax error
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return tuple(sorted(names))


def task_libs(task: dict) -> list[str]:
    """What a task needs importable: its `libs` and its tests' imports."""
    return sorted(set(task["libs"]) | set(test_imports(task.get("test", ""))))


def task_missing_libs(task: dict) -> list[str]:
    """What a task needs that is not importable here."""
    return missing_libs(task_libs(task))


def runnable_splits(splits: Splits) -> tuple[Splits, dict]:
    """Drop the tasks whose libraries are missing; return the kept splits and the skip counts."""
    kept, counts, libs = {}, {}, Counter()
    every = [task for name in ("train", "val", "test") for task in getattr(splits, name)]
    absent_here = set(missing_libs(sorted({lib for task in every for lib in task_libs(task)})))  # each looked up once
    for name in ("train", "val", "test"):
        kept[name], counts[name] = [], 0
        for task in getattr(splits, name):
            absent = [lib for lib in task_libs(task) if lib in absent_here]
            if absent:
                counts[name] += 1
                libs.update(absent)
            else:
                kept[name].append(task)
    counts["total"] = sum(counts[n] for n in ("train", "val", "test"))
    counts["missing_libraries"] = dict(libs.most_common())
    return Splits(**kept), counts


def load_splits(data_dir: str | os.PathLike | None = None) -> tuple[Splits, dict]:
    """The paper's splits with unrunnable tasks skipped, and the per-split skip counts."""
    return runnable_splits(official_splits(load_tasks(data_dir)))
