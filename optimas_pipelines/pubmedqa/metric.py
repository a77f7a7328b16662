"""Accuracy on yes/no/maybe, with a parser forgiving enough for a 135M chat model's free text."""
from __future__ import annotations

import re

from optimas_cli.system.pipeline import Metric

LABELS = ("yes", "no", "maybe")
DEFAULT_DECISION = "maybe"  # the model committed to nothing; 'maybe' is PubMedQA's label for exactly that

_WORD = r"(yes|no|maybe)\b"
# 'Answer: yes', '**Final answer:** No', 'The answer is maybe', 'the answer to the question is yes'
_MARKED = re.compile(rf"\banswer\b[^\n.]{{0,40}}?(?:\bis\b|:|=)\W*{_WORD}", re.IGNORECASE)
_LEADING = re.compile(rf"^\W*{_WORD}", re.IGNORECASE)
_ANY = re.compile(rf"\b{_WORD}", re.IGNORECASE)
# 'yes, no, or maybe' / 'yes/no/maybe': the model repeating the options, which commits to none of them
_ECHO = re.compile(r"\b(?:yes|no|maybe)\b(?:\s*(?:,|/|\bor\b|, or\b)\s*\b(?:yes|no|maybe)\b)+", re.IGNORECASE)
_UNDECIDED = re.compile(
    r"\b(uncertain|unclear|inconclusive|cannot be determined|can't be determined|not (?:be )?determined|"
    r"insufficient evidence|not enough (?:evidence|information)|possibly|perhaps)\b",
    re.IGNORECASE,
)


def parse_decision(text: str | None, default: str | None = DEFAULT_DECISION) -> str | None:
    """The yes/no/maybe a completion commits to.

    Echoes of the option list ('yes, no, or maybe') are ignored. Then, in order: the last explicit
    'answer ... X' (prompts ask for the answer on the last line, after any reasoning); a label the
    text starts with ('Yes, because ...'); the first label mentioned; a hedge ('unclear',
    'insufficient evidence') as maybe; else `default`.
    """
    text = _ECHO.sub(" ", text or "")
    if not text.strip():
        return default
    marked = _MARKED.findall(text)
    if marked:
        return marked[-1].lower()
    for pattern in (_LEADING, _ANY):
        match = pattern.search(text)
        if match:
            return match.group(1).lower()
    if _UNDECIDED.search(text):
        return "maybe"
    return default


def accuracy(example: dict, output: dict) -> float:
    return float(parse_decision(output.get("answer")) == example["answer"])


METRIC = Metric("accuracy", accuracy)
