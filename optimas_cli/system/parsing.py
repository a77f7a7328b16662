"""Outputs a component could not parse are counted, not hidden behind their fallback.

A parser that finds nothing it can read raises `Unparsed(fallback)`; the component uses the
fallback and counts a parse failure (`ctx.count(name, PARSE_FAILURES)`), so results.json and the
report show how often the LM's replies were unreadable: a weak model's weakness, measured.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

PARSE_FAILURES = "parse_failures"


class Unparsed(ValueError):
    """Nothing readable in a reply; `fallback` is the output the component uses instead."""

    def __init__(self, fallback: Any, reason: str = "nothing readable in the reply"):
        super().__init__(reason)
        self.fallback = fallback


def lenient(parse: Callable[..., Any]) -> Callable[..., Any]:
    """The parser returning its fallback instead of raising (callers that count nothing)."""

    def read(*args: Any, **kwargs: Any) -> Any:
        try:
            return parse(*args, **kwargs)
        except Unparsed as unparsed:
            return unparsed.fallback

    return read
