"""Which component Algorithm 1 optimizes next: uniform (the paper), round robin, or prioritized."""
from __future__ import annotations

from collections.abc import Sequence

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

    def pick(self, iteration: int, history: Sequence[dict], rng: np.random.Generator) -> str:
        if self.policy == "round_robin":
            return self.components[iteration % len(self.components)]
        if self.policy == "uniform":
            return self.components[int(rng.integers(len(self.components)))]
        weights = np.array([self._priority(c, history) for c in self.components])
        return self.components[int(rng.choice(len(self.components), p=weights / weights.sum()))]

    @staticmethod
    def _priority(component: str, history: Sequence[dict]) -> float:
        tried = [h for h in history if h["component"] == component]
        return (1 + sum(h["accepted"] for h in tried)) / (2 + len(tried))
