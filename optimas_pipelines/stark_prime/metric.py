"""The global reward: reciprocal rank of the gold among a query's five candidates (mean = MRR).

Ties are broken pessimistically: the gold ranks below every non-answer candidate scored the same
or higher, so a constant score list earns 1/5, never 1.0. With several answers among the
candidates, the best-ranked one counts (the first relevant hit, as in the official metric).

The single-LLM baseline answers with an entity name instead of scores; its answer is matched
against the candidates' names (exact match, else word overlap) to rank them. An answer that
matches no candidate earns 0: the model named nothing on the list (the paper's Single LLM row).
"""
from __future__ import annotations

import math
import re
from collections.abc import Sequence

from optimas_cli.system import Metric

_WORD = re.compile(r"[a-z0-9]+")


def reciprocal_rank(scores: Sequence[float], candidate_ids: Sequence[int], answer_ids: Sequence[int]) -> float:
    answers = set(answer_ids)
    gold = [s for s, c in zip(scores, candidate_ids, strict=True) if c in answers]
    if not gold:
        return 0.0
    best = max(gold)
    above = sum(1 for s, c in zip(scores, candidate_ids, strict=True) if c not in answers and s >= best)
    return 1.0 / (1 + above)


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def name_match_scores(answer: str, names: Sequence[str]) -> list[float]:
    """2.0 for a name equal to the answer (ignoring case and punctuation), else word-overlap F1."""
    said = _words(answer)
    out = []
    for name in names:
        words = _words(name)
        if said and words == said:
            out.append(2.0)
            continue
        common = len(set(said) & set(words))
        out.append(0.0 if not common else 2 * common / (len(set(said)) + len(set(words))))
    return out


def _valid(scores, n: int) -> bool:
    return (
        isinstance(scores, list | tuple)
        and len(scores) == n
        and all(isinstance(s, int | float) and not isinstance(s, bool) and math.isfinite(s) for s in scores)
    )


def stark_reciprocal_rank(example: dict, output: dict) -> float:
    candidates = example["candidate_ids"]
    scores = output.get("final_scores")
    if scores is None and output.get("answer_name") is not None:
        scores = name_match_scores(str(output["answer_name"]), example["candidate_names"])
        if not any(scores):
            return 0.0
    if not _valid(scores, len(candidates)):
        return 0.0  # a missing or malformed ranking ranks nothing
    return reciprocal_rank(scores, candidates, example["answer_ids"])


MRR = Metric("mrr", stark_reciprocal_rank)
