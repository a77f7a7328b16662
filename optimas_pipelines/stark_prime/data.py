"""STaRK-Prime examples: the real queries and splits joined with each query's five candidates.

Candidates come from, in this order: `candidates_file` (a prebuilt JSONL), `kb_dir` (a local
knowledge-base folder), a cached build, or PrimeKG through the `stark-qa` package (online).
Builds are cached as JSONL under <data dir>/stark_prime/cache (or `cache_dir`).
"""
from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

from optimas_cli.data_files import data_root
from optimas_cli.errors import DataError, UserError
from optimas_cli.system import Splits
from optimas_pipelines.stark_prime import candidates as cand
from optimas_pipelines.stark_prime.knowledge_base import LocalKnowledgeBase, folder_fingerprint
from optimas_pipelines.stark_prime.queries import (
    FOLDER,
    OFFICIAL_SIZES,
    SPLITS,
    Query,
    load_splits,
    query_files,
    select_queries,
)
from optimas_pipelines.stark_prime.stark_kb import StarkPrimeKnowledgeBase, stark_qa_installed

log = logging.getLogger(__name__)


def render_candidates(infos: list[str]) -> str:
    """The five infos as one numbered text, numbered as the scorers must answer (1-5)."""
    return "\n\n".join(f"Candidate {i}:\n{info.strip()}" for i, info in enumerate(infos, 1))


def make_example(q: Query, row: dict) -> dict:
    return {
        "question_id": q.query_id,
        "question": q.text,
        "answer_ids": list(q.answer_ids),
        "candidate_ids": list(row["candidate_ids"]),
        "candidate_names": list(row["names"]),
        "relation_info": render_candidates(row["relation_info"]),
        "text_info": render_candidates(row["text_info"]),
        "emb_scores": [float(s) for s in row["similarity"]],
    }


def offline_error(cache: Path) -> UserError:
    return UserError(
        "STaRK-Prime needs the PrimeKG knowledge base (node texts and relations) to build each query's five "
        "candidates, and none is available: the data folder holds only the queries and splits, neither kb_dir "
        f"nor candidates_file is set, no cached candidates are in {cache}, and the stark-qa package is not installed",
        "online, `pip install stark-qa` (it downloads PrimeKG from the hub dataset snap-stanford/stark; add "
        "emb_dir=<STaRK's emb/prime/text-embedding-ada-002 folder> for the paper's ada-002 candidates); offline, "
        "set kb_dir=<folder with nodes.jsonl> or candidates_file=<candidates JSONL> "
        "(formats in optimas_pipelines/stark_prime/README.md)",
    )


def default_cache_dir(data_dir) -> Path:
    root = data_root(data_dir)
    return (root / FOLDER / "cache") if root is not None else Path.home() / ".cache" / "optimas" / FOLDER


def _cache_path(cache_dir: Path, source: str, wanted: list[Query], seed: int, info_chars: int) -> Path:
    key = json.dumps({"ids": [q.query_id for q in wanted], "seed": seed, "info_chars": info_chars})
    return cache_dir / f"candidates-{source}-{hashlib.sha1(key.encode()).hexdigest()[:12]}.jsonl"


def _covering(path: Path, wanted: list[Query], info_chars: int) -> dict[int, dict] | None:
    if not path.exists():
        return None
    rows = cand.read_rows(path, info_chars)
    return rows if all(q.query_id in rows for q in wanted) else None


def _save(path: Path, rows: list[dict]) -> None:
    try:
        cand.write_rows(path, rows)
        log.info("cached STaRK-Prime candidates in %s", path)
    except OSError as exc:  # a read-only data folder must not stop the run
        log.warning("could not cache candidates in %s (%s); set cache_dir to a writable folder", path, exc)


def candidate_rows(
    wanted: list[Query], *, data_dir=None, kb_dir=None, candidates_file=None, emb_dir=None, skb_root=None,
    cache_dir=None, seed: int = 42, info_chars: int = cand.INFO_CHARS,
) -> tuple[dict[int, dict], str]:
    """The candidates row of every wanted query, and a line saying where they came from."""
    if candidates_file:
        path = Path(candidates_file).expanduser()
        if not path.exists():
            raise DataError(f"candidates_file {path} not found", "fix the path or leave candidates_file unset")
        rows = cand.read_rows(path, info_chars)
        missing = [q.query_id for q in wanted if q.query_id not in rows]
        if missing:
            raise DataError(
                f"{path} has no candidates for {len(missing)} selected query id(s) (first: {missing[0]})",
                "build it for the same split sizes, or lower train_size/val_size/test_size",
            )
        return rows, f"candidates_file {path}"
    cache = Path(cache_dir).expanduser() if cache_dir else default_cache_dir(data_dir)
    source = "kb-" + folder_fingerprint(kb_dir) if kb_dir else "stark-qa-" + ("ada-002" if emb_dir else "tfidf")
    path = _cache_path(cache, source, wanted, seed, info_chars)
    rows = _covering(path, wanted, info_chars)
    if rows is not None:
        return rows, f"cache {path}"
    if kb_dir:
        kb = LocalKnowledgeBase(kb_dir)
    elif stark_qa_installed():
        kb = StarkPrimeKnowledgeBase(skb_root=skb_root, emb_dir=emb_dir)
    else:
        raise offline_error(cache)
    built = cand.build_rows(kb, wanted, seed, info_chars)
    _save(path, built)
    return {r["query_id"]: r for r in built}, f"{'kb_dir ' + str(kb_dir) if kb_dir else 'stark-qa'} ({kb.similarity_kind})"


def load_stark_prime(
    data_dir=None, *, train_size: int | None = OFFICIAL_SIZES["train"], val_size: int | None = OFFICIAL_SIZES["val"],
    test_size: int | None = OFFICIAL_SIZES["test"], **candidate_options,
) -> tuple[Splits, dict]:
    """The paper's splits of STaRK-Prime examples, and loader facts for results.json."""
    query_csv, split_dir = query_files(data_dir)
    queries, split_ids = load_splits(query_csv, split_dir)
    selected = select_queries(split_ids, {"train": train_size, "val": val_size, "test": test_size})
    wanted = list({i: queries[i] for s in SPLITS for i in selected[s]}.values())
    rows, source = candidate_rows(wanted, data_dir=data_dir, **candidate_options)
    by_split = [[make_example(queries[i], rows[i]) for i in selected[s]] for s in SPLITS]
    gold_counts = [sum(c in ex["answer_ids"] for c in ex["candidate_ids"]) for split in by_split for ex in split]
    info = {
        "candidates_source": source,
        "queries_total": {s: len(ids) for s, ids in split_ids.items()},
        "examples_with_several_answers_among_candidates": sum(n > 1 for n in gold_counts),
    }
    return Splits(*by_split), info
