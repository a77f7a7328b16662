"""Amazon's floors (optimas_cli/report/floors.py): chance, the training majority index, and a no-LM
lexical rule, each scored on the run's own test examples; `group` splits them by source file."""
from __future__ import annotations

import re

from optimas_cli.report.floors import Floor, budget_cut, majority_floor
from optimas_pipelines.amazon.data import load_splits, source_of

_WORD = re.compile(r"\w+")


def train_examples(config: dict) -> list[dict]:
    """The training split the run saw: the loader's (in the run's order), cut at the run's budget.train_size."""
    stratified = bool((config.get("pipeline") or {}).get("stratified_subsets"))  # absent in older runs: false
    return budget_cut(load_splits(config.get("data_dir"), stratified=stratified).train, config)


def group(example: dict) -> str:
    """The source file an example came from ('en' or 'multilingual')."""
    return source_of(example)


def floors(train: list[dict], test: list[dict], config: dict) -> list[Floor]:
    return [
        Floor("chance", "a uniformly random candidate: 1 / number of candidates",
              {e["key"]: 1 / len(e["choices"]) for e in test}),
        majority_floor([str(e["answer"]) for e in train], test, lambda a, e: float(str(e["answer"]) == a),
                       lambda a: f"index {a}"),
        Floor("lexical overlap", "the candidate sharing the most distinct words with the session (no LM); a tie "
              "scores the chance of picking the answer among the tied", {e["key"]: _overlap_score(e) for e in test}),
    ]


def _overlap_score(example: dict) -> float:
    session = set(_WORD.findall(example["sequence"].lower()))
    shared = [len(session & set(_WORD.findall(choice.lower()))) for choice in example["choices"]]
    tied = [i for i, n in enumerate(shared) if n == max(shared)]
    return 1 / len(tied) if int(example["answer"]) in tied else 0.0
