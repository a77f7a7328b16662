"""The five candidates of each query: the paper's selection, and the candidates JSONL that stores it.

Selection (the official `filter_candidates`, made deterministic): take the top-5 nodes by vector
similarity; the gold is the best-ranked answer among them, or, when none made the top 5, the answer
node most similar to the query; the other four are the best-ranked remaining top hits (they may hold
further answers, as in the official code). The five are shuffled with a per-query seed, so the
gold's position tells a scorer nothing. Relation and text information are cut to 1,024 characters.

A candidates JSONL holds one query a line:
    {"query_id": int, "candidate_ids": [5 ints], "similarity": [5 floats],
     "relation_info": [5 str], "text_info": [5 str], "names": [5 str] (optional)}
("simiarity", the official files' spelling, is accepted too; missing names are read from the
"- name: ..." line that both infos start with.)
"""
from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path
from typing import Protocol

import numpy as np

from optimas_cli.data_files import read_jsonl
from optimas_cli.errors import DataError
from optimas_pipelines.stark_prime.queries import Query

N_CANDIDATES = 5
INFO_CHARS = 1024


class KnowledgeBase(Protocol):
    node_ids: list[int]
    similarity_kind: str

    def has(self, node_id: int) -> bool: ...
    def name(self, node_id: int) -> str: ...
    def relation_info(self, node_id: int) -> str: ...
    def text_info(self, node_id: int) -> str: ...
    def similarities(self, query: Query) -> np.ndarray: ...


def select_candidates(
    node_ids: list[int],
    scores: np.ndarray,
    answer_ids: tuple[int, ...],
    query_id: int,
    seed: int,
    index_of: dict[int, int] | None = None,
) -> list[tuple[int, float]]:
    """(node id, similarity) of the query's five candidates, exactly one chosen gold among them.

    `index_of` maps node id -> position in `node_ids` (pass it to skip rebuilding it per query).
    """
    if len(node_ids) < N_CANDIDATES:
        raise DataError(f"the knowledge base has {len(node_ids)} nodes", f"it needs at least {N_CANDIDATES}")
    index_of = index_of if index_of is not None else {n: i for i, n in enumerate(node_ids)}
    order = np.argsort(-scores, kind="stable")  # ties keep node-id order: reproducible
    top = [node_ids[i] for i in order[:N_CANDIDATES]]
    in_top = [n for n in top if n in set(answer_ids)]
    if in_top:
        gold = in_top[0]
    else:
        known = [a for a in answer_ids if a in index_of]
        if not known:
            raise DataError(
                f"none of the answer nodes {list(answer_ids)} of query {query_id} is in the knowledge base",
                "use the PrimeKG knowledge base these queries were written for",
            )
        gold = max(known, key=lambda a: (scores[index_of[a]], -a))
    chosen = [gold] + [n for n in top if n != gold][: N_CANDIDATES - 1]
    random.Random(f"{seed}:{query_id}").shuffle(chosen)
    return [(n, float(scores[index_of[n]])) for n in chosen]


def truncate(text: str, limit: int = INFO_CHARS) -> str:
    return text[:limit]


def build_rows(kb: KnowledgeBase, queries: list[Query], seed: int, info_chars: int = INFO_CHARS) -> list[dict]:
    """One candidates row per query, from the knowledge base (the slow step the cache saves)."""
    rows = []
    index_of = {n: i for i, n in enumerate(kb.node_ids)}
    for q in queries:
        picked = select_candidates(kb.node_ids, kb.similarities(q), q.answer_ids, q.query_id, seed, index_of)
        ids = [n for n, _ in picked]
        rows.append({
            "query_id": q.query_id,
            "candidate_ids": ids,
            "similarity": [round(s, 4) for _, s in picked],
            "names": [kb.name(n) for n in ids],
            "relation_info": [truncate(kb.relation_info(n), info_chars) for n in ids],
            "text_info": [truncate(kb.text_info(n), info_chars) for n in ids],
        })
    return rows


_NAME_LINE = re.compile(r"^\s*-\s*name:\s*(.+)$", re.MULTILINE)


def _name_from_info(info: str) -> str:
    m = _NAME_LINE.search(info)
    return m.group(1).strip() if m else ""


def _validate_row(row: dict) -> None:
    if "similarity" not in row and "simiarity" in row:
        row["similarity"] = row.pop("simiarity")
    if not isinstance(row.get("query_id"), int):
        raise ValueError("query_id must be an integer")
    for key, kind in (("candidate_ids", int), ("similarity", (int, float)), ("relation_info", str), ("text_info", str)):
        value = row.get(key)
        if not isinstance(value, list) or len(value) != N_CANDIDATES or not all(isinstance(v, kind) for v in value):
            raise ValueError(f"{key} must be a list of {N_CANDIDATES} {getattr(kind, '__name__', 'numbers')}")
    if "names" not in row:
        row["names"] = [_name_from_info(r) or _name_from_info(t) for r, t in zip(row["relation_info"], row["text_info"], strict=True)]


def read_rows(path: Path, info_chars: int = INFO_CHARS) -> dict[int, dict]:
    """A candidates JSONL by query id (infos cut to `info_chars`, as the official loader does)."""
    rows = {}
    for row in read_jsonl(path, _validate_row):
        row["relation_info"] = [truncate(t, info_chars) for t in row["relation_info"]]
        row["text_info"] = [truncate(t, info_chars) for t in row["text_info"]]
        rows[row["query_id"]] = row
    return rows


def write_rows(path: Path, rows: list[dict]) -> None:
    """Atomic write: an interrupted build never leaves a half cache that looks complete."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(tmp, path)
