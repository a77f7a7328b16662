"""Where the embedded model's generate time goes: prefill (the prompts' forward pass) vs decode (the rest).

The decode loop (decode.py) calls `StepClock.first_step_done` once the prompts' forward pass has chosen each
row's first token. So prefill = the loop's start to that call, decode = that call to the loop's end; prefill
tokens are the prompt tokens really computed (a prompt shared by n samples once, no padding), decode tokens the
generated tokens after each row's first. `ENGINE` sums them for the process; the run ledger reads it at each
phase's start and end.
No import of torch or transformers here: the ledger imports this module.
"""
from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass


@dataclass
class EngineTotals:
    prefill_tokens: int = 0
    prefill_seconds: float = 0.0
    decode_tokens: int = 0
    decode_seconds: float = 0.0

    def minus(self, other: EngineTotals) -> EngineTotals:
        return EngineTotals(**{k: v - getattr(other, k) for k, v in asdict(self).items()})

    def plus(self, other: EngineTotals) -> EngineTotals:
        return EngineTotals(**{k: v + getattr(other, k) for k, v in asdict(self).items()})


class EngineMeter:
    """Thread-safe running totals of every generate of this process."""

    def __init__(self) -> None:
        self._totals = EngineTotals()
        self._lock = threading.Lock()

    def add(self, totals: EngineTotals) -> None:
        with self._lock:
            self._totals = self._totals.plus(totals)

    def totals(self) -> EngineTotals:
        with self._lock:
            return EngineTotals(**asdict(self._totals))


ENGINE = EngineMeter()


class StepClock:
    """Notes when a generate call's first step ended."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.first_step: float | None = None
        self.ended: float | None = None

    def first_step_done(self) -> None:
        if self.first_step is None:
            self.first_step = time.perf_counter()

    def stop(self) -> None:
        """generate returned (called before its output is decoded to text, which is not generation)."""
        self.ended = time.perf_counter()

    def finish(self, prefilled: int, completion_tokens: list[int]) -> EngineTotals:
        """Add this generate's split to ENGINE (nothing if it took no step) and return it."""
        if self.first_step is None or self.ended is None:
            return EngineTotals()
        split = EngineTotals(prefill_tokens=prefilled, prefill_seconds=self.first_step - self.started,
                             decode_tokens=sum(max(n - 1, 0) for n in completion_tokens),
                             decode_seconds=self.ended - self.first_step)
        ENGINE.add(split)
        return split
