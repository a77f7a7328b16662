"""Which component Algorithm 1 optimizes next: uniform (the paper), round robin, or prioritized."""
from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np


class ComponentScheduler:
    """`uniform`: i_t ~ Uniform(components), as in the paper.
    `round_robin`: the components in topological order, cyclically.
    `prioritized`: sample by Laplace-smoothed acceptance rate, (1 + accepted) / (2 + tried), so a
    component whose proposals keep passing the gate is revisited more often (paper, Boundary 4).
    """

    def __init__(self, components: Sequence[str], policy: str = "uniform"):
        if policy not in ("uniform", "round_robin", "prioritized"):
            raise ValueError(f"unknown scheduler {policy!r}; use uniform, round_robin or prioritized")
        if not components:
            raise ValueError("no optimizable component to schedule")
        self.components, self.policy = list(components), policy

    def pick(self, iteration: int, history: Sequence, rng: np.random.Generator,
             allowed: Collection[str] | None = None) -> str:
        """`allowed` narrows the choice (e.g. to components whose local reward has training pairs);
        when it leaves nothing, every component stays eligible."""
        eligible = [c for c in self.components if allowed is None or c in allowed] or self.components
        if self.policy == "round_robin":
            start = iteration % len(self.components)
            ring = self.components[start:] + self.components[:start]
            return next(c for c in ring if c in eligible)
        if self.policy == "uniform":
            return eligible[int(rng.integers(len(eligible)))]
        weights = np.array([self._priority(c, history) for c in eligible])
        return eligible[int(rng.choice(len(eligible), p=weights / weights.sum()))]

    @staticmethod
    def _priority(component: str, history: Sequence) -> float:
        tried = [h for h in history if h.component == component]
        return (1 + sum(h.accepted for h in tried)) / (2 + len(tried))
