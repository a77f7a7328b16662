"""Amazon next-item selection (KDD Cup 2024 ShopBench) and the paper's splits: 335 / 60 / 99.

The official Optimas recipe: each of the two CSV files (English, then multilingual) is split at
its first 80% of rows into train and test; the train parts are concatenated and the first 85% of
them train, the rest validate. No shuffling anywhere, so the split is the same on every machine.
"""
from __future__ import annotations

import ast
import csv
import hashlib
import os
import urllib.request
from pathlib import Path

from optimas_cli.data_files import data_root, local_file, missing_data, unreadable_as_data_error
from optimas_cli.errors import DataError
from optimas_cli.system.pipeline import Splits

FOLDER = "amazon"
# (file, id prefix, sha256) in the order the official code concatenates them
FILES = (
    ("session_based_next_item_selection_dataset.csv", "en",
     "b36ac7c89c8d01663da8f1f0ea747aa09866a2e6a2ea807b18bfeef74d97d472"),
    ("multilingual_session_based_recommendation_dataset.csv", "multilingual",
     "b2396e3b3ff4851ceaa402a85ce271982520dd22a19637c56148be479711a4a4"),
)
# No hub dataset carries these files; online users get them from the paper's repository, pinned.
SOURCE_URL = "https://raw.githubusercontent.com/snap-stanford/optimas/691d9e9fadedb4003d195d8f440c4105a8a26fea/examples/data/"
SEQUENCE_MARKER = "Product Sequence:"
TEST_FRACTION, VALIDATION_FRACTION = 0.2, 0.15


def load_splits(data_dir: str | os.PathLike | None = None, stratified: bool = False) -> Splits:
    """The official splits; `stratified` reorders each split (same examples) so that every budget's first n
    hold the source files in the split's own proportions, where the official order puts every English
    row first (a small budget then trains on English only and validates on multilingual only)."""
    train_val, test = [], []
    for name, prefix, sha256 in FILES:
        rows = read_csv(_locate(data_dir, name, sha256), prefix)
        cut = int(len(rows) * (1 - TEST_FRACTION))
        train_val += rows[:cut]
        test += rows[cut:]
    n_train = int(len(train_val) * (1 - VALIDATION_FRACTION))
    splits = Splits(train=train_val[:n_train], val=train_val[n_train:], test=test)
    return Splits(*(stratified_order(rows) for rows in (splits.train, splits.val, splits.test))) if stratified else splits


def source_of(example: dict) -> str:
    """The file an example came from: the id prefix read_csv gives it ('en' or 'multilingual')."""
    return str(example["id"]).split("-")[0]


def stratified_order(rows: list[dict]) -> list[dict]:
    """The rows reordered so that each prefix holds every source in its share of the whole: the next row
    comes from the source furthest behind its share (ties: FILES order); within a source the order is kept."""
    queues = {prefix: [r for r in rows if source_of(r) == prefix] for _, prefix, _ in FILES}
    share = {prefix: len(q) / len(rows) for prefix, q in queues.items()} if rows else {}
    taken = dict.fromkeys(queues, 0)
    out: list[dict] = []
    while len(out) < len(rows):
        behind = max((p for p in queues if taken[p] < len(queues[p])),
                     key=lambda p: share[p] * (len(out) + 1) - taken[p])
        out.append(queues[behind][taken[behind]])
        taken[behind] += 1
    return out


def read_csv(path: Path, id_prefix: str) -> list[dict]:
    """Examples {id, sequence, choices, answer}; a malformed row raises DataError with file and line."""
    examples = []
    with unreadable_as_data_error(path), open(path, encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in ("question", "choices", "answer") if c not in (reader.fieldnames or [])]
        if missing:
            raise DataError(f"{path} line 1: missing column(s) {missing}", "restore the file's header row")
        first_line = reader.line_num + 1  # a quoted field spans lines, so track where each row starts
        for row in reader:
            try:
                examples.append(_example(f"{id_prefix}-{len(examples)}", row))
            except (SyntaxError, TypeError, ValueError) as exc:
                raise DataError(f"malformed row in {path} line {first_line}: {exc}", "fix or remove that row") from None
            first_line = reader.line_num + 1
    return examples


def _example(row_id: str, row: dict) -> dict:
    question = row["question"] or ""
    if SEQUENCE_MARKER not in question:
        raise ValueError(f"question has no {SEQUENCE_MARKER!r} line")
    choices = ast.literal_eval(row["choices"] or "")
    if not isinstance(choices, list) or len(choices) < 2 or not all(isinstance(c, str) for c in choices):
        raise ValueError("choices is not a Python list of at least two product titles")
    answer = int(row["answer"])
    if not 0 <= answer < len(choices):
        raise ValueError(f"answer {answer} is not an index into the {len(choices)} choices")
    sequence = question.split(SEQUENCE_MARKER)[-1].strip()
    return {"id": row_id, "sequence": sequence, "choices": choices, "answer": str(answer)}


def _locate(data_dir, name: str, sha256: str) -> Path:
    path = local_file(data_dir, FOLDER, name)
    if path is not None:
        return path
    cached = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "optimas" / FOLDER / name
    if cached.exists():
        return cached
    if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("HF_DATASETS_OFFLINE") == "1":
        raise missing_data("Amazon next-item data", (FOLDER, name), f"{SOURCE_URL}{name}", data_dir)
    return _download(name, sha256, cached, data_dir)


def _download(name: str, sha256: str, target: Path, data_dir) -> Path:
    url = SOURCE_URL + name
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            payload = response.read()
    except OSError as exc:
        raise missing_data("Amazon next-item data", (FOLDER, name), url, data_dir) from exc
    if hashlib.sha256(payload).hexdigest() != sha256:
        raise DataError(f"{url} does not match the pinned file (sha256 differs)",
                        f"place {name} under {data_root(data_dir) or '<data_dir>'}/{FOLDER}/ by hand")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(payload)
    return target
