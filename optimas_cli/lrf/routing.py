"""Routing accuracy: how often a router picks the best value for an input, against the exact per-input best.

Only a pipeline with an exact model of its reward has that best (`pipeline.local_reward_oracle`: the
synthetic simulator). For each per-input choice of the system, on the given examples run once under the
final configuration (their router inputs as that configuration realizes them), the exact expected reward of
every value on every input (the oracle's score_values: every other component under the configuration) gives
the best value(s) of each input, and each router is measured against it:

  oracle       the exact per-input best itself (accuracy 1, regret 0: the ceiling)
  leaderboard  one value for every input: the one with the highest mean exact reward on these inputs (the
               best any context-free ranking of values can pick)
  random       a uniform pick per input, in expectation
  pre          the run's value scorer s_k(x, v), before running anything ({"route": "lrf_pre"}), where the
               run's local reward has one

The post-execution route ({"route": "lrf"}, r_k on every value's output) is left out: measuring it runs and
embeds every value on every input, 25,600 reward-model passes per router at 128 options on 200 inputs.
accuracy: the share of inputs whose pick is
among the best (exact ties all count); regret: the mean exact reward the pick leaves behind the best's.
Measured on a ledger of its own: what it runs is not the run's spend.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from optimas_cli.system import ConfigKind, Pipeline, RunContext, RunLedger, SystemConfig
from optimas_cli.system.local_reward import LocalReward

TIE = 1e-12  # exact rewards this close are one best
ROUTERS = ("oracle", "leaderboard", "random", "pre")


def routing_accuracy(pipeline: Pipeline, config: SystemConfig, examples: Sequence[dict], lrf: LocalReward,
                     lm: Any = None) -> dict | None:
    """{"n_examples", "per_component": {name: {"values", "inputs", router: {"accuracy", "regret"}}}, "mean":
    {router: {"accuracy", "regret"}} (macro over components)}; None without an exact model or a router."""
    exact = getattr(pipeline, "local_reward_oracle", None)
    system = pipeline.system
    routers = [n for n in system.order
               if system.components[n].kind is ConfigKind.CHOICE and system.components[n].per_instance]
    if exact is None or not routers or not examples:
        return None
    ctx = RunContext(ledger=RunLedger(len(system)), lm=lm, lrf=lrf, phase="routing_accuracy")
    trajs = system.run(list(examples), config, ctx)
    per_component = {}
    for name in routers:
        comp = system.components[name]
        inputs = [t.steps[name]["inputs"] for t in trajs if not t.steps[name]["skipped"]]
        if not inputs:
            continue
        values = comp.candidate_values()
        truth = np.asarray(exact.score_values(name, config, inputs, values), dtype=np.float64)
        picks = {"oracle": truth.argmax(axis=1), "leaderboard": np.full(len(inputs), truth.mean(axis=0).argmax())}
        if hasattr(lrf, "scores_values") and lrf.scores_values(name):
            picks["pre"] = np.asarray(lrf.score_values(name, inputs, values)).argmax(axis=1)
        per_component[name] = {"values": len(values), "inputs": len(inputs),
                               **{router: measured(truth, p) for router, p in picks.items()},
                               "random": random_pick(truth)}
    mean = {router: {key: float(np.mean([c[router][key] for c in per_component.values()]))
                     for key in ("accuracy", "regret")}
            for router in ROUTERS if per_component and all(router in c for c in per_component.values())}
    return {"n_examples": len(examples), "per_component": per_component, "mean": mean}


def best_sets(truth: np.ndarray) -> np.ndarray:
    """Per input (row), which values (columns) are the best."""
    return truth >= truth.max(axis=1, keepdims=True) - TIE


def measured(truth: np.ndarray, picks: np.ndarray) -> dict:
    rows = np.arange(len(truth))
    return {"accuracy": float(best_sets(truth)[rows, picks].mean()),
            "regret": float((truth.max(axis=1) - truth[rows, picks]).mean())}


def random_pick(truth: np.ndarray) -> dict:
    """A uniform pick's expected accuracy and regret."""
    return {"accuracy": float(best_sets(truth).mean(axis=1).mean()),
            "regret": float((truth.max(axis=1) - truth.mean(axis=1)).mean())}
