"""STaRK-Prime's floors (optimas_cli/report/floors.py): a random ranking of each query's candidates, the
candidates' own retrieval-similarity order, and a no-LM word-overlap ranking, scored by the pipeline's
reciprocal rank on the run's own test examples. No majority floor: answers are knowledge-base entities,
no label recurs across queries."""
from __future__ import annotations

import math
import re

from optimas_cli.report.floors import Floor
from optimas_pipelines.stark_prime.lexical import tokens
from optimas_pipelines.stark_prime.metric import reciprocal_rank

_CANDIDATE = re.compile(r"^Candidate \d+:\n", re.MULTILINE)  # data.render_candidates' numbering


def train_examples(config: dict) -> list[dict]:
    """None of these floors learns from training examples (loading them would need the knowledge base)."""
    return []


def floors(train: list[dict], test: list[dict], config: dict) -> list[Floor]:
    return [
        Floor("chance", "the expected reciprocal rank of a uniformly random order of the candidates",
              {e["key"]: _random_rank(e) for e in test}),
        Floor("majority", "not defined: answers are knowledge-base entities, none recurs as a label", None),
        Floor("retrieval order", "the candidates ranked by the retriever's similarity (emb_scores), no LM",
              {e["key"]: reciprocal_rank(e["emb_scores"], e["candidate_ids"], e["answer_ids"]) for e in test}),
        Floor("lexical overlap", "the candidates ranked by distinct content words shared between the question and "
              "the candidate's name and texts (no LM); a tie ranks the answer below", {e["key"]: _overlap(e) for e in test}),
    ]


def _random_rank(example: dict) -> float:
    """E[1 / rank of the first answer] when m of the n candidates are answers, every order equally likely."""
    n = len(example["candidate_ids"])
    m = len(set(example["candidate_ids"]) & set(example["answer_ids"]))
    if m == 0:
        return 0.0
    return sum(math.comb(n - r, m - 1) / math.comb(n, m) / r for r in range(1, n - m + 2))


def _overlap(example: dict) -> float:
    relations = _CANDIDATE.split(example["relation_info"])[1:]
    texts = _CANDIDATE.split(example["text_info"])[1:]
    question = set(tokens(example["question"]))
    scores = [float(len(question & set(tokens(" ".join(parts)))))
              for parts in zip(example["candidate_names"], relations, texts, strict=True)]
    return reciprocal_rank(scores, example["candidate_ids"], example["answer_ids"])
