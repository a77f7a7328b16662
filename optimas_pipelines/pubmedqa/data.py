"""PubMedQA (expert-labelled PQA-L) and the paper's splits: 475 train / 25 validation / 500 test.

Test is the official 500 ids of test_ground_truth.json; train is the other 500 in file order, and
the last 5% of it is validation (the official Optimas code). Every split keeps ori_pqal.json's order. Where test_ground_truth.json is
absent (the hub fallback), the official test ids are regenerated with the PubMedQA authors' own
split recipe (preprocess/split_dataset.py: seed 0, label-stratified halving), which reproduces
test_ground_truth.json exactly from ori_pqal.json (tests check this).
"""
from __future__ import annotations

import math
import os
import random
import re
from pathlib import Path

from optimas_cli.data_files import local_file, missing_data, read_json
from optimas_cli.errors import DataError
from optimas_cli.system.pipeline import Splits

FOLDER = "pubmedqa"
DATA_FILE = "ori_pqal.json"
TEST_IDS_FILE = "test_ground_truth.json"
HUB_DATASET, HUB_CONFIG = "qiaojin/PubMedQA", "pqa_labeled"
LABELS = ("yes", "no", "maybe")
VALIDATION_FRACTION = 0.05


def load_splits(data_dir: str | os.PathLike | None = None) -> Splits:
    rows, test_ids = _load_rows(data_dir)
    test_set = set(test_ids)
    unknown = [pmid for pmid in test_ids if pmid not in rows]
    if unknown:
        raise DataError(
            f"{TEST_IDS_FILE} names {len(unknown)} PubMed id(s) absent from {DATA_FILE} (e.g. {unknown[0]})",
            f"use the {DATA_FILE} and {TEST_IDS_FILE} of the same PubMedQA release",
        )
    train_val = [example for pmid, example in rows.items() if pmid not in test_set]
    # Test in data-file order too: test_ground_truth.json lists every 'yes' before any 'no', so a
    # budget that keeps the first N test questions would otherwise score on 'yes' questions only.
    test = [example for pmid, example in rows.items() if pmid in test_set]
    n_train = int(len(train_val) * (1 - VALIDATION_FRACTION))
    return Splits(train=train_val[:n_train], val=train_val[n_train:], test=test)


def official_test_ids(labels: dict[str, str]) -> list[str]:
    """The PubMedQA authors' split: per label, shuffle with seed 0 and keep the second half.

    `labels` maps PubMed id -> final_decision in the order of ori_pqal.json. The 500 ids come back
    in the order of test_ground_truth.json.
    """
    rng = random.Random(0)
    by_label: dict[str, list[str]] = {label: [] for label in LABELS}
    for pmid, label in labels.items():
        by_label[label].append(pmid)
    halves = {}
    for label, pmids in by_label.items():
        rng.shuffle(pmids)
        cut = math.ceil(len(pmids) / 2)
        halves[label] = (pmids[:cut], pmids[cut:])
    first = [p for label in LABELS for p in halves[label][0]]
    test = [p for label in LABELS for p in halves[label][1]]
    if len(test) != len(first):  # the recipe then moves one random id of the first half over
        picked = rng.choice(first)
        test.append(picked)
    return test


# -- reading ----------------------------------------------------------------------------------
def _load_rows(data_dir) -> tuple[dict[str, dict], list[str]]:
    data_path = local_file(data_dir, FOLDER, DATA_FILE)
    if data_path is None:
        rows = _hub_rows(data_dir)
        return rows, official_test_ids({pmid: ex["answer"] for pmid, ex in rows.items()})
    rows = _read_local(data_path)
    ids_path = local_file(data_dir, FOLDER, TEST_IDS_FILE)
    if ids_path is None:
        return rows, official_test_ids({pmid: ex["answer"] for pmid, ex in rows.items()})
    test_labels = read_json(ids_path)
    if not isinstance(test_labels, dict):
        raise DataError(f"{ids_path} should map PubMed ids to labels", "restore the file from the PubMedQA release")
    return rows, [str(pmid) for pmid in test_labels]


def _read_local(path: Path) -> dict[str, dict]:
    raw = read_json(path)
    if not isinstance(raw, dict):
        raise DataError(f"{path} should map PubMed ids to records", "restore the file from the PubMedQA release")
    text = None
    rows = {}
    for pmid, record in raw.items():
        try:
            rows[str(pmid)] = _example(str(pmid), record["QUESTION"], record["CONTEXTS"], record["final_decision"])
        except (KeyError, TypeError, ValueError) as exc:
            text = text if text is not None else path.read_text(encoding="utf-8", errors="replace")
            raise DataError(
                f"malformed record in {path} line {_line_of(text, pmid)} (PubMed id {pmid}): {exc}",
                "fix or remove that record",
            ) from None
    return rows


def _line_of(text: str, pmid: str) -> int | str:
    """The line where the record's key stands, so a malformed record can be found in the file."""
    match = re.search(rf'"{re.escape(str(pmid))}"\s*:', text)
    return text.count("\n", 0, match.start()) + 1 if match else "?"


def _hub_rows(data_dir) -> dict[str, dict]:
    try:
        import datasets

        table = datasets.load_dataset(HUB_DATASET, HUB_CONFIG, split="train")
    except Exception as exc:  # offline, or the hub is unreachable: say what to provide instead
        raise missing_data("PubMedQA", (FOLDER, DATA_FILE), f"the hub dataset {HUB_DATASET} ({HUB_CONFIG})", data_dir) from exc
    rows = {}
    for i, record in enumerate(table):
        pmid = str(record["pubid"])
        try:
            rows[pmid] = _example(pmid, record["question"], record["context"]["contexts"], record["final_decision"])
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"malformed row {i} of hub dataset {HUB_DATASET} (PubMed id {pmid}): {exc}") from None
    return rows


def _example(pmid: str, question, contexts, decision) -> dict:
    if not isinstance(question, str) or not question.strip():
        raise ValueError("QUESTION is empty or not text")
    if not isinstance(contexts, list) or not all(isinstance(c, str) for c in contexts):
        raise ValueError("CONTEXTS is not a list of strings")
    if decision not in LABELS:
        raise ValueError(f"final_decision is {decision!r}, expected one of {list(LABELS)}")
    return {"id": pmid, "question": question.strip(), "context": " ".join(contexts), "answer": decision}
