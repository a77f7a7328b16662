"""Reading five candidate scores out of a (possibly weak) model's free text.

Accepted, in this order: keyed scores ({"1": 0.8, ...}, `1: 0.8` lines, "Candidate 1 ... 0.8"),
a bracketed list of five numbers, or a text whose only numbers are five scores. Scores on a
0-10 or 0-100 scale are rescaled to [0, 1]. Anything else is unparsable: the caller then uses
neutral scores (equal for all five, so the ranking falls back to the other signals) and counts it.
"""
from __future__ import annotations

import re

N_SCORES = 5
NEUTRAL_SCORE = 0.5

_NUMBER = r"(-?\d*\.?\d+)"
# `"3": 0.7`, `3: 0.7`, `3) 0.7`, `3 = 0.7`; the look-behind keeps the 5 of "0.5" from reading as a key.
_KEYED = re.compile(r"""(?<![\w.])["']?([1-5])["']?\s*(?::|=|\)|\])\s*["']?""" + _NUMBER)
_NAMED = re.compile(r"(?:candidate|entity|item|option)\s*#?\s*([1-5])\b[^\d\n]{0,40}?" + _NUMBER, re.IGNORECASE)
_BRACKETED = re.compile(r"\[([^\[\]]*)\]")
_ANY_NUMBER = re.compile(r"(?<![\w.])" + _NUMBER)


def _keyed(text: str) -> list[float] | None:
    found: dict[int, float] = {}
    for pattern in (_KEYED, _NAMED):
        for m in pattern.finditer(text):
            found.setdefault(int(m.group(1)), float(m.group(2)))
        if len(found) == N_SCORES:
            return [found[i] for i in range(1, N_SCORES + 1)]
    return None


def _listed(text: str) -> list[float] | None:
    for m in _BRACKETED.finditer(text):
        numbers = _ANY_NUMBER.findall(m.group(1))
        if len(numbers) == N_SCORES:
            return [float(x) for x in numbers]
    numbers = _ANY_NUMBER.findall(text)
    return [float(x) for x in numbers] if len(numbers) == N_SCORES else None


def _to_unit_scale(scores: list[float]) -> list[float] | None:
    top = max(scores)
    scale = 1.0 if top <= 1.0 else 10.0 if top <= 10.0 else 100.0 if top <= 100.0 else None
    if scale is None:
        return None
    return [min(max(s / scale, 0.0), 1.0) for s in scores]


def parse_scores(text: str) -> list[float] | None:
    """Five scores in [0, 1], or None when the text holds no readable set of five."""
    scores = _keyed(text) or _listed(text)
    return _to_unit_scale(scores) if scores else None


class ParseCounts:
    """How many completions each scorer could and could not read (reported in results)."""

    def __init__(self):
        self.counts: dict[str, dict[str, int]] = {}

    def record(self, component: str, parsed: bool) -> None:
        slot = self.counts.setdefault(component, {"parsed": 0, "unparsable": 0})
        slot["parsed" if parsed else "unparsable"] += 1
