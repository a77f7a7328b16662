"""Which component Algorithm 1 optimizes next: uniform, round robin, prioritized, and the eligible subset."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from optimas_cli.optim.history import HistoryEntry
from optimas_cli.optim.scheduler import ComponentScheduler

NAMES = ["a", "b", "c"]


def picks(policy, n=600, history=(), allowed=None, seed=0):
    scheduler, rng = ComponentScheduler(NAMES, policy), np.random.default_rng(seed)
    return [scheduler.pick(t, list(history), rng, allowed) for t in range(n)]


def test_uniform_draws_every_component_about_equally():
    counts = Counter(picks("uniform"))
    assert set(counts) == set(NAMES) and all(160 < n < 240 for n in counts.values())


def test_round_robin_cycles_in_topological_order_and_skips_ineligible_components():
    assert picks("round_robin", n=6) == ["a", "b", "c", "a", "b", "c"]
    assert picks("round_robin", n=4, allowed={"a", "c"}) == ["a", "c", "c", "a"]


@pytest.mark.parametrize("policy", ["uniform", "prioritized"])
def test_only_allowed_components_are_picked(policy):
    assert set(picks(policy, allowed={"b", "c"})) == {"b", "c"}


def test_nothing_allowed_leaves_every_component_eligible():
    assert set(picks("uniform", allowed=set())) == set(NAMES)


def test_prioritized_revisits_the_component_whose_proposals_pass_the_gate():
    def entry(component, accepted):
        return HistoryEntry(iteration=1, component=component, val_before=0.0, val_after=0.0, accepted=accepted,
                            runs_so_far=0.0)

    history = [entry("a", True)] * 5 + [entry("b", False)] * 5
    counts = Counter(picks("prioritized", history=history))
    assert counts["a"] > counts["c"] > counts["b"]  # (1+5)/7 > 1/2 > 1/7
