"""Retrieval recall@k of the offline BM25 retriever, with the raw question as the query.

    python -m optimas_pipelines.hotpotqa.retrieval_recall [--split test] [--data-dir DIR]

recall@k: the share of a question's supporting-fact titles found in its top k, averaged over
questions; both@k: the share of questions whose supporting titles are all in the top k. It bounds
what the answer generator can know at each retriever setting before any LM is involved.
"""
from __future__ import annotations

import argparse
import json

from optimas_pipelines.hotpotqa.passage_search import PassageSearch
from optimas_pipelines.hotpotqa.system import K_CHOICES, build


def recall_at_k(search: PassageSearch, examples: list[dict], ks: tuple[int, ...] = K_CHOICES) -> dict[int, dict]:
    hits = search.search([ex["question"] for ex in examples], max(ks))
    table = {}
    for k in ks:
        shares, complete = [], []
        for ex, passages in zip(examples, hits, strict=True):
            gold, found = set(ex["supporting_titles"]), {p.title for p in passages[:k]}
            shares.append(len(gold & found) / len(gold))
            complete.append(gold <= found)
        table[k] = {"recall": sum(shares) / len(shares), "all_supporting_found": sum(complete) / len(complete)}
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=("train", "val", "test"), default="test")
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()
    pipeline = build(data_dir=args.data_dir)
    examples = getattr(pipeline.splits, args.split)
    search = pipeline.system.components["retriever"].search
    report = {"split": args.split, "questions": len(examples), **pipeline.info,
              "recall_at_k": recall_at_k(search, examples)}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
