"""Where the embedded model's generate time goes: prefill (the prompts' forward pass) vs decode (the rest).

LocalModel.serve times each prefill of a group of prompts and each decode step. Prefill tokens are the prompt
tokens really computed (a prompt shared by n samples once, no padding), decode tokens the rows each step ran one
token on (a row's first token comes from its prefill). `ENGINE` sums them for the process; the run ledger reads it
at each phase's start and end.
No import of torch or transformers here: the ledger imports this module.
"""
from __future__ import annotations

import threading
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
