"""HotpotQA's floors (optimas_cli/report/floors.py), scored by the pipeline's answer F1 on the run's own
test examples: the training split's most frequent answer for every question (HotpotQA's comparison
questions make 'yes' a real floor), and BM25 alone: the title of the top passage the pipeline's own BM25
search finds for the question, as the answer. No chance level: answers are open text."""
from __future__ import annotations

from optimas_cli.report.floors import Floor, budget_cut, majority_floor
from optimas_pipelines.hotpotqa.data import (
    DEFAULT_TRAIN_SIZE,
    DEFAULT_VAL_SIZE,
    load_rows,
    make_splits,
    pooled_paragraphs,
)
from optimas_pipelines.hotpotqa.metric import f1_score, normalize_answer
from optimas_pipelines.hotpotqa.passage_search import BM25PassageIndex, Passage, PassageSearch


def _rows(config: dict):
    """The pipeline's rows at the run's seed and sizes, as optimas_pipelines.hotpotqa.build loads them."""
    pipeline = config.get("pipeline") or {}
    sizes = int(pipeline.get("train_size") or DEFAULT_TRAIN_SIZE), int(pipeline.get("val_size") or DEFAULT_VAL_SIZE)
    return load_rows(config.get("data_dir"), seed=int(pipeline.get("seed") or 0), min_pool=sum(sizes)), sizes


def train_examples(config: dict) -> list[dict]:
    """The training split the run saw: the pipeline's shuffled pool at its seed and sizes, cut at the
    run's budget.train_size."""
    rows, (train_size, val_size) = _rows(config)
    return budget_cut(make_splits(rows, train_size, val_size, 0).train, config)


def floors(train: list[dict], test: list[dict], config: dict) -> list[Floor]:
    found = [Floor("chance", "not defined: answers are open text, not a choice among a finite set", None)]
    if train:
        found.append(majority_answer(train, test))
    rows, _ = _rows(config)
    corpus = [Passage(title, text) for title, text in pooled_paragraphs(rows.test + rows.pool)]
    return [*found, bm25_floor(BM25PassageIndex.load_or_build(corpus), test)]


def majority_answer(train: list[dict], test: list[dict]) -> Floor:
    """The training majority, answers normalized ('Yes' and 'yes.' are one answer), scored by answer F1."""
    return majority_floor([normalize_answer(e["gold_answer"]) for e in train], test,
                          lambda answer, example: f1_score(answer, example["gold_answer"]))


def bm25_floor(search: PassageSearch, test: list[dict]) -> Floor:
    top = search.search([e["question"] for e in test], 1)
    return Floor("BM25 top title", "the title of the top BM25 passage for the question (the pipeline's corpus and "
                 "search, no LM) given as the answer", {e["key"]: f1_score(hits[0].title if hits else "", e["gold_answer"])
                                                        for e, hits in zip(test, top, strict=True)})
