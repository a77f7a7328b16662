"""STaRK-Prime queries and the official splits: stark_qa.csv plus {train,val,test}.index.

The paper's code keeps the first 250 train / 25 validation / 100 test query ids, in the order
of the split files; `select_queries` does the same (sizes are options, None keeps a whole split).
"""
from __future__ import annotations

import ast
import csv
from dataclasses import dataclass
from pathlib import Path

from optimas_cli.data_files import data_root, missing_data
from optimas_cli.errors import DataError

FOLDER = "stark_prime"
QUERY_FILE = "stark_qa.csv"
SPLITS = ("train", "val", "test")
OFFICIAL_SIZES = {"train": 250, "val": 25, "test": 100}


@dataclass(frozen=True)
class Query:
    query_id: int
    text: str
    answer_ids: tuple[int, ...]


def parse_answer_ids(text: str) -> tuple[int, ...]:
    """'[18423]' or '[95312, 35882]' -> node ids; anything else raises ValueError."""
    value = ast.literal_eval(text.strip())
    if not isinstance(value, list | tuple) or not value or not all(isinstance(v, int) for v in value):
        raise ValueError(f"answer_ids must be a non-empty list of node ids, got {text!r}")
    return tuple(value)


def read_queries(path: Path) -> dict[int, Query]:
    """Every query of stark_qa.csv by id; a malformed row raises DataError with its line."""
    queries: dict[int, Query] = {}
    with open(path, encoding="utf-8", newline="") as fh:  # newline="": some queries span lines
        reader = csv.DictReader(fh)
        missing = [c for c in ("id", "query", "answer_ids") if c not in (reader.fieldnames or [])]
        if missing:
            raise DataError(f"{path} lacks column(s) {missing}", "restore the STaRK-Prime stark_qa.csv")
        for row in reader:
            try:
                qid = int(row["id"])
                if not (row["query"] or "").strip():
                    raise ValueError("empty query")
                queries[qid] = Query(qid, row["query"].strip(), parse_answer_ids(row["answer_ids"] or ""))
            except (ValueError, SyntaxError) as exc:
                raise DataError(f"malformed row in {path} line {reader.line_num}: {exc}", "fix or remove that row") from None
    return queries


def read_split(path: Path) -> list[int]:
    """The query ids of one split file, in file order (one integer a line)."""
    ids = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            ids.append(int(line))
        except ValueError:
            raise DataError(f"malformed query id in {path} line {lineno}: {line.strip()!r}", "fix that line") from None
    return ids


def query_files(data_dir) -> tuple[Path, Path]:
    """(stark_qa.csv, folder of the split files): local first, else the stark-qa package's download."""
    root = data_root(data_dir)
    if root is not None and (root / FOLDER / QUERY_FILE).exists():
        return root / FOLDER / QUERY_FILE, root / FOLDER
    try:
        from stark_qa import load_qa
    except ImportError:
        raise missing_data(
            "STaRK-Prime queries", (FOLDER, QUERY_FILE), "the stark-qa package (pip install stark-qa)", data_dir
        ) from None
    qa = load_qa("prime", root=str(Path.home() / ".cache" / "optimas" / "stark"))  # downloads qa/prime once
    return Path(qa.query_dir) / QUERY_FILE, Path(qa.split_dir)


def load_splits(query_csv: Path, split_dir: Path) -> tuple[dict[int, Query], dict[str, list[int]]]:
    """All queries and the three official split id lists."""
    queries = read_queries(query_csv)
    splits = {}
    for split in SPLITS:
        path = split_dir / f"{split}.index"
        if not path.exists():
            raise DataError(f"split file {path} not found", "restore the STaRK-Prime split files next to stark_qa.csv")
        ids = read_split(path)
        unknown = [i for i in ids if i not in queries]
        if unknown:
            raise DataError(
                f"{path} names {len(unknown)} query id(s) absent from {QUERY_FILE} (first: {unknown[0]})",
                "use the split files that belong to this stark_qa.csv",
            )
        splits[split] = ids
    return queries, splits


def select_queries(splits: dict[str, list[int]], sizes: dict[str, int | None]) -> dict[str, list[int]]:
    """The first `sizes[split]` ids of each split, in file order (the paper's selection)."""
    return {s: ids if sizes.get(s) is None else ids[: sizes[s]] for s, ids in splits.items()}
