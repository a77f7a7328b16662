"""HotpotQA questions, the paper's splits and the pooled paragraph corpus the offline retriever searches.

Test is the paper's 100 questions (hotpot_distractor_sample100.json). Train and validation come from
the 1,100 rpt_*.jsonl dev-set questions minus the 18 that are test questions, shuffled with a fixed
seed. Smaller `train_size`/`val_size` budgets give subsets of the default splits.

Without the local files the same shapes come from the hub dataset (distractor validation split):
the test questions by id, the train/validation pool from the rest.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from optimas_cli.data_files import local_file, missing_data, read_json, read_jsonl, require_fields
from optimas_cli.errors import DataError, UserError
from optimas_cli.system import Splits
from optimas_pipelines.hotpotqa.test_ids import TEST_IDS

FOLDER = "hotpotqa"
TEST_FILE = "hotpot_distractor_sample100.json"
POOL_FILES = ("rpt_train.jsonl", "rpt_dev.jsonl", "rpt_test.jsonl")
HUB_NAME, HUB_CONFIG, HUB_SPLIT = "hotpotqa/hotpot_qa", "distractor", "validation"
# The offline train/validation pool: 1,100 rpt questions minus the 18 test questions among them.
OFFLINE_POOL_SIZE = 1_082
DEFAULT_TRAIN_SIZE, DEFAULT_VAL_SIZE = 832, 250


def validate_row(row: dict) -> None:
    """A HotpotQA row in the hub schema; raises KeyError/TypeError/ValueError naming what is wrong."""
    require_fields(row, ("id", "question", "answer", "supporting_facts", "context"))
    if not isinstance(row["question"], str) or not row["question"].strip():
        raise ValueError("'question' must be a non-empty string")
    if not isinstance(row["answer"], str):
        raise TypeError("'answer' must be a string")
    titles, sentences = row["context"]["title"], row["context"]["sentences"]
    if len(titles) != len(sentences):
        raise ValueError(f"context has {len(titles)} titles but {len(sentences)} sentence lists")
    if not all(isinstance(s, list) for s in sentences):
        raise TypeError("context 'sentences' must be a list of sentence lists")
    if not isinstance(row["supporting_facts"]["title"], list):
        raise TypeError("supporting_facts 'title' must be a list")


@dataclass
class HotpotRows:
    """Raw rows (hub schema): the test questions, and the shuffled train/validation pool."""

    test: list[dict]
    pool: list[dict]
    source: str  # "local files" or the hub dataset name
    test_overlap_removed: int  # pool questions dropped because they are test questions


def _read_test_file(path: Path) -> list[dict]:
    rows = read_json(path)
    if not isinstance(rows, list):
        raise DataError(f"{path} must hold a JSON list of questions", "restore the file")
    for index, row in enumerate(rows):
        try:
            validate_row(row)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise DataError(f"malformed row in {path} entry {index}: {exc!r}", "fix or remove that entry") from None
    return rows


def _read_pool_files(paths: list[Path]) -> list[dict]:
    return [row for path in paths for row in read_jsonl(path, validate_row)]


def _hub_rows(data_dir) -> list[dict]:
    try:
        import datasets

        dataset = datasets.load_dataset(HUB_NAME, HUB_CONFIG, split=HUB_SPLIT)
    except Exception as exc:  # offline, not installed, or the hub refused: all mean "no data here"
        error = missing_data("HotpotQA data", (FOLDER, TEST_FILE), f"the hub dataset {HUB_NAME}", data_dir)
        raise DataError(error.problem + f" (hub: {type(exc).__name__}: {exc})", error.fix) from None
    rows = [dict(row) for row in dataset]
    for index, row in enumerate(rows):
        try:
            validate_row(row)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise DataError(f"malformed row in hub {HUB_NAME} {HUB_SPLIT} row {index}: {exc!r}", "report it upstream") from None
    return rows


def load_rows(data_dir: str | Path | None, seed: int = 0, min_pool: int = OFFLINE_POOL_SIZE) -> HotpotRows:
    """Local files where present, else the hub; the pool is shuffled with `seed`.

    From the hub the pool keeps at least `min_pool` questions (and at least the offline pool size).
    """
    test_path = local_file(data_dir, FOLDER, TEST_FILE)
    pool_paths = [local_file(data_dir, FOLDER, name) for name in POOL_FILES]
    hub: list[dict] | None = None
    if test_path is not None:
        test = _read_test_file(test_path)
    else:
        hub = _hub_rows(data_dir)
        by_id = {row["id"]: row for row in hub}
        missing = [i for i in TEST_IDS if i not in by_id]
        if missing:
            raise DataError(f"{len(missing)} of the paper's test ids are not in {HUB_NAME} {HUB_SPLIT}", "use the local files")
        test = [by_id[i] for i in TEST_IDS]
    test_ids = {row["id"] for row in test}

    pool_local = all(p is not None for p in pool_paths)
    if pool_local:
        candidates = _read_pool_files(pool_paths)
        pool = [row for row in candidates if row["id"] not in test_ids]
        removed = len(candidates) - len(pool)
        random.Random(seed).shuffle(pool)
    else:
        hub = hub if hub is not None else _hub_rows(data_dir)
        candidates = [row for row in hub if row["id"] not in test_ids]
        removed = len(hub) - len(candidates)
        random.Random(seed).shuffle(candidates)
        # Same scale as offline: the corpus pools the contexts of about 1,182 questions.
        pool = candidates[:max(OFFLINE_POOL_SIZE, min_pool)]
    sources = dict.fromkeys(["local files" if test_path else HUB_NAME, "local files" if pool_local else HUB_NAME])
    return HotpotRows(test=test, pool=pool, source=" + ".join(sources), test_overlap_removed=removed)


def to_example(row: dict) -> dict:
    """System input `question` plus the gold fields the metric and the retrieval diagnostics need."""
    return {
        "id": row["id"],
        "question": row["question"],
        "gold_answer": row["answer"],
        "supporting_titles": list(dict.fromkeys(row["supporting_facts"]["title"])),
        "type": row.get("type"),
        "level": row.get("level"),
    }


def make_splits(rows: HotpotRows, train_size: int = DEFAULT_TRAIN_SIZE, val_size: int = DEFAULT_VAL_SIZE,
                test_size: int | None = None) -> Splits:
    if min(train_size, val_size) < 0 or (test_size is not None and test_size < 0):
        raise UserError("HotpotQA split sizes must be non-negative", "set train_size, val_size, test_size >= 0")
    if train_size + val_size > len(rows.pool):
        raise UserError(
            f"HotpotQA train_size {train_size} + val_size {val_size} exceeds the {len(rows.pool)} questions available",
            f"choose sizes that sum to at most {len(rows.pool)}",
        )
    # Validation from the front of the shuffled pool, train from the back: a smaller budget takes a
    # subset of each, and no question ever moves between train and validation.
    val = rows.pool[:val_size]
    train = rows.pool[len(rows.pool) - train_size:] if train_size else []
    test = rows.test if test_size is None else rows.test[:test_size]
    return Splits(train=[to_example(r) for r in train], val=[to_example(r) for r in val], test=[to_example(r) for r in test])


def pooled_paragraphs(rows: list[dict]) -> list[tuple[str, str]]:
    """(title, text) of every context paragraph of `rows`, one per title (first occurrence wins).

    A title names one Wikipedia paragraph; the same paragraph recurs as a distractor of several
    questions, so deduplicating by title keeps one copy and makes gold and distractors compete.
    """
    seen: dict[str, str] = {}
    for row in rows:
        for title, sentences in zip(row["context"]["title"], row["context"]["sentences"], strict=True):
            if title not in seen:
                seen[title] = "".join(sentences).strip()
    return list(seen.items())
