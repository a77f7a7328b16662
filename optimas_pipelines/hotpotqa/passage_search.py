"""Passage search backends for the HotpotQA retriever: BM25 over the pooled paragraphs (offline default).

The BM25 index is built once and cached on disk under $OPTIMAS_CACHE_DIR (default ~/.cache/optimas),
keyed by a hash of the paragraphs themselves, so a changed data file gives a new index and the hub
fallback caches the same way as the local files.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import bm25s

from optimas_cli.lm.paths import cache_root

STOPWORDS = "en"
# Bump when the tokenization or the way documents are built changes, so stale caches are not reused.
INDEX_FORMAT = 1


@dataclass(frozen=True)
class Passage:
    title: str
    text: str

    def render(self) -> str:
        """How a passage reads in a prompt: its title first, as ColBERT's wiki abstracts do."""
        return f"{self.title} | {' '.join(self.text.split())}"  # one line per passage


class PassageSearch(Protocol):
    def search(self, queries: list[str], k: int) -> list[list[Passage]]:
        """The top-k passages for each query, best first (fewer when fewer match)."""
        ...


def _fingerprint(passages: list[Passage]) -> str:
    digest = hashlib.sha256(f"format={INDEX_FORMAT};bm25s={bm25s.__version__};stop={STOPWORDS}".encode())
    for p in passages:
        digest.update(p.title.encode())
        digest.update(b"\x00")
        digest.update(p.text.encode())
        digest.update(b"\x01")
    return digest.hexdigest()[:20]


def _tokenize(texts: list[str], return_ids: bool):
    return bm25s.tokenize(texts, stopwords=STOPWORDS, return_ids=return_ids, show_progress=False)


class BM25PassageIndex:
    """BM25 over passages (title + text). `build_seconds` is None when the index came from the cache."""

    _loaded: dict[str, BM25PassageIndex] = {}  # one index per process and corpus

    def __init__(self, passages: list[Passage], bm25: bm25s.BM25, build_seconds: float | None):
        self.passages, self.bm25, self.build_seconds = passages, bm25, build_seconds

    @classmethod
    def load_or_build(cls, passages: list[Passage], cache_dir: Path | None = None) -> BM25PassageIndex:
        if not passages:
            raise ValueError("cannot build a BM25 index over no passages")
        key = _fingerprint(passages)
        if key in cls._loaded:
            return cls._loaded[key]
        folder = (cache_dir or cache_root() / "bm25") / f"hotpotqa-{key}"
        index = cls._load(passages, folder) or cls._build_and_save(passages, folder)
        cls._loaded[key] = index
        return index

    @classmethod
    def _load(cls, passages: list[Passage], folder: Path) -> BM25PassageIndex | None:
        meta = folder / "optimas_meta.json"
        if not meta.exists() or json.loads(meta.read_text()).get("num_passages") != len(passages):
            return None
        try:
            bm25 = bm25s.BM25.load(str(folder), load_vocab=True, show_progress=False, verbosity=0)
        except (OSError, ValueError, KeyError):  # a damaged cache is rebuilt, not fatal
            return None
        return cls(passages, bm25, build_seconds=None)

    @classmethod
    def _build_and_save(cls, passages: list[Passage], folder: Path) -> BM25PassageIndex:
        start = time.perf_counter()
        bm25 = bm25s.BM25()
        bm25.index(_tokenize([f"{p.title} {p.text}" for p in passages], return_ids=True), show_progress=False)
        index = cls(passages, bm25, build_seconds=time.perf_counter() - start)
        # Write to a temporary folder and rename, so a concurrent or killed run never sees half an index.
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
        try:
            bm25.save(str(tmp), show_progress=False)
            (tmp / "optimas_meta.json").write_text(json.dumps({"num_passages": len(passages)}))
            os.replace(tmp, folder)
        except OSError:  # another process won the race (or the disk is read-only): the index still works
            shutil.rmtree(tmp, ignore_errors=True)
        return index

    def search(self, queries: list[str], k: int) -> list[list[Passage]]:
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        tokens = [[t for t in q if t in self.bm25.vocab_dict] for q in _tokenize(list(queries), return_ids=False)]
        results: list[list[Passage]] = [[] for _ in queries]
        asked = [i for i, t in enumerate(tokens) if t]  # a query with no indexed word matches nothing
        if not asked:
            return results
        k = min(k, len(self.passages))
        docs, scores = self.bm25.retrieve([tokens[i] for i in asked], k=k, show_progress=False, n_threads=1)
        for i, row_docs, row_scores in zip(asked, docs, scores, strict=True):
            # Zero-score passages share no word with the query: their order is arbitrary, leave them out.
            results[i] = [self.passages[int(d)] for d, s in zip(row_docs, row_scores, strict=True) if s > 0]
        return results
