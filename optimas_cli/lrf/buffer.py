"""ReplayBuffer: older preference pairs, per component, mixed into Stage 2 batches against forgetting.

Each component keeps its most recent `capacity_per_component` pairs (first in, first out): pairs
from long-gone configurations are the stalest labels (upstream drift), so they leave first.
A Stage 2 batch of size B holds about B * mix_ratio replayed pairs and the rest fresh ones.
"""
from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterable, Sequence

from optimas_cli.lrf.pairs import PreferencePair


class ReplayBuffer:
    def __init__(self, capacity_per_component: int = 500, mix_ratio: float = 0.5, seed: int = 0):
        if capacity_per_component < 1:
            raise ValueError("capacity_per_component must be at least 1")
        if not 0.0 <= mix_ratio < 1.0:
            raise ValueError("mix_ratio is the replayed share of a batch: at least 0 and below 1")
        self.capacity = int(capacity_per_component)
        self.mix_ratio = float(mix_ratio)
        self.rng = random.Random(seed)
        self.pairs: dict[str, deque[PreferencePair]] = {}

    def __len__(self) -> int:
        return sum(len(q) for q in self.pairs.values())

    def components(self) -> list[str]:
        return [c for c, q in self.pairs.items() if q]

    def add(self, pairs: Iterable[PreferencePair]) -> None:
        for p in pairs:
            self.pairs.setdefault(p.component, deque(maxlen=self.capacity)).append(p)

    def state(self) -> dict:
        """Its pairs and random state, for a checkpoint: a resumed run replays the same pairs."""
        version, internal, gauss = self.rng.getstate()
        return {"rng": [version, list(internal), gauss],
                "pairs": {c: [p.to_dict() for p in q] for c, q in self.pairs.items()}}

    def restore(self, state: dict) -> None:
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.pairs = {c: deque((PreferencePair.from_dict(p) for p in rows), maxlen=self.capacity)
                      for c, rows in state["pairs"].items()}

    def sample(self, n: int, components: Sequence[str] | None = None) -> list[PreferencePair]:
        """n pairs drawn uniformly (without replacement while possible) from the named components' pairs."""
        names = self.components() if components is None else [c for c in components if self.pairs.get(c)]
        pool = [p for c in names for p in self.pairs[c]]
        if not pool or n <= 0:
            return []
        if n <= len(pool):
            return self.rng.sample(pool, n)
        return [self.rng.choice(pool) for _ in range(n)]

    def batch_shape(self, batch_size: int, n_fresh_available: int) -> tuple[int, int]:
        """(fresh, replayed) counts of one batch: replayed/total = mix_ratio, at least one fresh pair,
        and no fresh pair twice in a batch (with few fresh pairs the batch shrinks, the ratio holds)."""
        if not len(self) or self.mix_ratio == 0.0:
            return min(batch_size, n_fresh_available), 0
        n_fresh = max(1, batch_size - round(batch_size * self.mix_ratio))
        n_fresh = min(n_fresh, n_fresh_available)
        return n_fresh, round(n_fresh * self.mix_ratio / (1.0 - self.mix_ratio))

    def mixed_batches(self, fresh: Sequence[PreferencePair], batch_size: int, steps: int) -> list[list[PreferencePair]]:
        """`steps` batches of fresh pairs (cycled, reshuffled each pass) plus replayed ones (see batch_shape)."""
        if not fresh:
            return []
        n_fresh, n_replay = self.batch_shape(batch_size, len(fresh))
        order: list[PreferencePair] = []
        batches = []
        for _ in range(steps):
            batch = []
            while len(batch) < n_fresh:
                if not order:
                    order = list(fresh)
                    self.rng.shuffle(order)
                batch.append(order.pop())
            batches.append(batch + self.sample(n_replay))
        return batches
