"""ReplayBuffer: older preference pairs, per component, mixed into Stage 2 batches against forgetting.

Each component keeps its most recent `capacity_per_component` pairs (first in, first out): pairs
from long-gone configurations are the stalest labels (upstream drift), so they leave first.
A Stage 2 batch of size B holds about B * mix_ratio replayed pairs and the rest fresh ones.

A Stage 2 that adapts only some components' heads on a frozen backbone replays only their pairs
(`replaying_only`): the other heads are then left exactly as they were.

One comparison (component, input, the two outputs) is held once: a newer pair of it, with either
label, replaces the older one, and a batch never replays a comparison its fresh pairs measure again;
the buffer never asks r_k to prefer y over y' and y' over y on the same input.
"""
from __future__ import annotations

import json
import random
from collections import deque
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager

from optimas_cli.lrf.pairs import PreferencePair


def comparison(pair: PreferencePair) -> tuple[str, str, frozenset[str]]:
    """What a pair compares, whichever output won: (component, input, {the two outputs})."""
    def text(value: dict) -> str:
        return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)

    return pair.component, text(pair.context), frozenset((text(pair.chosen), text(pair.rejected)))


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
        self._replay_only: set[str] | None = None  # set inside `replaying_only`

    def __len__(self) -> int:
        return sum(len(q) for q in self.pairs.values())

    def components(self) -> list[str]:
        return [c for c, q in self.pairs.items() if q]

    @contextmanager
    def replaying_only(self, components: Collection[str]) -> Iterator[None]:
        """Inside the block, Stage 2 batches replay only `components`' pairs."""
        self._replay_only = set(components)
        try:
            yield
        finally:
            self._replay_only = None

    def _replayable(self) -> list[str]:
        return [c for c in self.components() if self._replay_only is None or c in self._replay_only]

    def add(self, pairs: Iterable[PreferencePair]) -> None:
        """Append the pairs; each replaces a held pair of the same comparison (an older measurement of it)."""
        newest: dict[tuple, PreferencePair] = {}
        for p in pairs:
            newest.pop(comparison(p), None)  # re-insert: the later measurement keeps the later position
            newest[comparison(p)] = p
        for component in dict.fromkeys(p.component for p in newest.values()):
            held = self.pairs.get(component, ())
            kept = [q for q in held if comparison(q) not in newest]
            self.pairs[component] = deque(kept + [p for p in newest.values() if p.component == component],
                                          maxlen=self.capacity)

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
        return self._draw([p for c in names for p in self.pairs[c]], n)

    def _draw(self, pool: list[PreferencePair], n: int) -> list[PreferencePair]:
        if not pool or n <= 0:
            return []
        if n <= len(pool):
            return self.rng.sample(pool, n)
        return [self.rng.choice(pool) for _ in range(n)]

    def batch_shape(self, batch_size: int, n_fresh_available: int) -> tuple[int, int]:
        """(fresh, replayed) counts of one batch: replayed/total = mix_ratio, at least one fresh pair,
        and no fresh pair twice in a batch (with few fresh pairs the batch shrinks, the ratio holds)."""
        if not any(self.pairs[c] for c in self._replayable()) or self.mix_ratio == 0.0:
            return min(batch_size, n_fresh_available), 0
        n_fresh = max(1, batch_size - round(batch_size * self.mix_ratio))
        n_fresh = min(n_fresh, n_fresh_available)
        return n_fresh, round(n_fresh * self.mix_ratio / (1.0 - self.mix_ratio))

    def mixed_batches(self, fresh: Sequence[PreferencePair], batch_size: int, steps: int) -> list[list[PreferencePair]]:
        """`steps` batches of fresh pairs (cycled, reshuffled each pass) plus replayed ones (see batch_shape),
        never a held pair of a comparison that a fresh pair measures again."""
        if not fresh:
            return []
        n_fresh, n_replay = self.batch_shape(batch_size, len(fresh))
        again = {comparison(p) for p in fresh}
        replayable = [p for c in self._replayable() for p in self.pairs[c] if comparison(p) not in again]
        order: list[PreferencePair] = []
        batches = []
        for _ in range(steps):
            batch = []
            while len(batch) < n_fresh:
                if not order:
                    order = list(fresh)
                    self.rng.shuffle(order)
                batch.append(order.pop())
            batches.append(batch + self._draw(replayable, n_replay))
        return batches
