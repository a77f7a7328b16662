"""Test doubles shared by the suite (kept tiny; real-model tests live beside them)."""
from __future__ import annotations

from collections.abc import Callable

from optimas_cli.lm.types import LMRequest, LMResponse


class ScriptedLM:
    """An LM client whose answer is a function of the request; records every request it gets."""

    def __init__(self, answer: Callable[[LMRequest], str] | str = "ok"):
        self.answer = answer if callable(answer) else (lambda _req, text=answer: text)
        self.requests: list[tuple[str, LMRequest]] = []
        self.phases: list[str] = []  # the phase of each complete() call

    def complete(self, requests: list[LMRequest], component: str = "-", phase: str = "-") -> list[LMResponse]:
        out = []
        self.phases.append(phase)
        for req in requests:
            self.requests.append((component, req))
            out.append(LMResponse(texts=[self.answer(req) for _ in range(req.n)]))
        return out
