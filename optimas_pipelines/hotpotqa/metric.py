"""HotpotQA answer F1, exactly as the official evaluation script (hotpot_evaluate_v1.py) computes it."""
from __future__ import annotations

import re
import string
from collections import Counter

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
# The official script scores these answers all-or-nothing: a partial token overlap with "yes"
# must not earn credit (e.g. "no, it is not" vs "no").
_SPECIAL = ("yes", "no", "noanswer")


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation, drop the articles a/an/the, collapse whitespace (official order)."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def f1_score(prediction: str | None, gold: str) -> float:
    pred, ref = normalize_answer(prediction or ""), normalize_answer(gold)
    if (pred in _SPECIAL or ref in _SPECIAL) and pred != ref:
        return 0.0
    pred_tokens, ref_tokens = pred.split(), ref.split()
    same = sum((Counter(pred_tokens) & Counter(ref_tokens)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(ref_tokens)
    return 2 * precision * recall / (precision + recall)


def answer_f1(example: dict, output: dict) -> float:
    """The pipeline's global reward: F1 of the system's `answer` against the example's `gold_answer`."""
    return f1_score(output.get("answer"), example["gold_answer"])
