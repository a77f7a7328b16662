"""The local reward r_k as the loop, the local optimizers and per-input routes use it: whatever scores one
component's outputs on its inputs (a trained lrf.model.LocalRewardModel, the exact lrf.oracle.OracleLRF, or a
baseline's scorer in methods/scorers.py)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class LocalReward(Protocol):
    def score(self, component: str, inputs: Sequence[dict], outputs: Sequence[dict], /) -> Sequence[float]:
        """One r_k per (input, output) pair of `component`, higher is better."""
        ...
