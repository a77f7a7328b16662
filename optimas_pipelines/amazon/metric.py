"""Accuracy of the chosen next item, with a parser forgiving enough for a 135M chat model's text."""
from __future__ import annotations

import re
from collections.abc import Sequence

from optimas_cli.system.pipeline import Metric

_MARKER = re.compile(r"\b(?:answer|option|choice|item|index|candidate|number)\b", re.IGNORECASE)
# after a marker: 'Answer: 2', 'option #1', 'answer is [3]', 'Index = 0'
_AFTER_MARKER = re.compile(r"[^\w\n]{0,4}(?:(?:is|would be|was)\b[^\w\n]{0,4})?(\d+)(?!\d)", re.IGNORECASE)
# the whole reply is an index, or starts with one: '2', '2.', '(2) because ...', '[1]'
_LEADING = re.compile(r"^[^\w\n]{0,3}(\d+)(?:[^\w\n]*$|[.):\]])")
_ORDINALS = {"first": 0, "second": 1, "third": 2, "fourth": 3, "fifth": 4}
_ORDINAL = re.compile(r"\b(first|second|third|fourth|fifth)\s+(?:option|item|choice|one|product|candidate)\b",
                      re.IGNORECASE)
# '1. 1. 2. 3', '1. 2022-01-01: ...': a model starting its own numbered list, not choosing item 1
_ENUMERATION = re.compile(r"^\s+\d")
_DIGIT = re.compile(r"(?<![\w.,])(\d)(?![\w.,]?\d)")
_TOKEN = re.compile(r"\w+")
FUZZY_OVERLAP = 0.6  # share of a title's words the reply must contain to count as naming it


def parse_choice(text: str | None, choices: Sequence[str] = ()) -> str:
    """The index (as a string) of the item a reply chooses, or '' when it names none.

    In order: an index after an explicit marker ('Answer: 2', 'Option 1'; the last one wins, as
    replies reason first); a reply that is or starts with an index (unless it goes on to quote a
    candidate's title, in full or cut off by the token limit, which then wins); a title quoted in full; 'the second option'; a
    candidate most of whose title words the reply repeats; the first lone digit. With `choices`
    unknown, any index is accepted and titles are not matched. A reply that opens a numbered list of
    numbers ('1. 1. 2. 3', '1. 2022-01-01') names no item unless it quotes a title: the embedded
    135M model writes that for 5 of 20 real test rows, and reading its list marker as "item 1" was a
    phantom pick.
    """
    if not text:
        return ""
    valid = (lambda i: 0 <= i < len(choices)) if choices else (lambda i: i >= 0)
    for marker in reversed(list(_MARKER.finditer(text))):
        match = _AFTER_MARKER.match(text, marker.end())
        if match and valid(int(match.group(1))):
            return str(int(match.group(1)))
    quoted = _quoted_title(text, choices) if choices else None
    match = _LEADING.match(text.strip())
    if match and valid(int(match.group(1))):
        # '1. <title>': a model numbering its own list from 1 still names its pick by the title,
        # even when the token limit cut the title short
        rest = text.strip()[match.end():]
        if quoted is None and choices:
            quoted = _title_starting(rest, choices)
        if quoted is None and text.strip()[match.end() - 1] in ".)" and _ENUMERATION.match(rest):
            return ""
        return str(quoted if quoted is not None else int(match.group(1)))
    if quoted is not None:
        return str(quoted)
    match = _ORDINAL.search(text)
    if match and valid(_ORDINALS[match.group(1).lower()]):
        return str(_ORDINALS[match.group(1).lower()])
    if choices:
        similar = _similar_title(text, choices)
        if similar is not None:
            return str(similar)
    for match in _DIGIT.finditer(text):
        if valid(int(match.group(1))):
            return match.group(1)
    return ""


def _normal(text: str) -> str:
    return " ".join(_TOKEN.findall(text.lower()))


def _quoted_title(text: str, choices: Sequence[str]) -> int | None:
    """The candidate whose full title the reply contains (the longest, when one title contains another)."""
    reply = _normal(text)
    found = [(len(_normal(c)), i) for i, c in enumerate(choices) if _normal(c) and _normal(c) in reply]
    return max(found)[1] if found else None


def _title_starting(text: str, choices: Sequence[str], min_words: int = 4) -> int | None:
    """The one candidate whose title begins with `text` (at least `min_words` words of it)."""
    start = _normal(text)
    if len(start.split()) < min_words:
        return None
    found = [i for i, c in enumerate(choices) if _normal(c).startswith(start)]
    return found[0] if len(found) == 1 else None


def _similar_title(text: str, choices: Sequence[str]) -> int | None:
    """The candidate most of whose title words the reply repeats, when exactly one does best."""
    words = set(_TOKEN.findall(text.lower()))
    overlaps = []
    for i, choice in enumerate(choices):
        title = set(_TOKEN.findall(choice.lower()))
        overlaps.append((len(title & words) / len(title) if title else 0.0, i))
    overlaps.sort(reverse=True)
    best = overlaps[0]
    if best[0] < FUZZY_OVERLAP or (len(overlaps) > 1 and overlaps[1][0] == best[0]):
        return None
    return best[1]


def accuracy(example: dict, output: dict) -> float:
    return float(parse_choice(str(output.get("answer") or ""), example["choices"]) == example["answer"])


METRIC = Metric("accuracy", accuracy)
