"""Exact expected scores of the simulator (spec.py's model), and its optimum.

E[y_k(x)] = q_k(v_k, t) * (1 - c + c * mean_p E[y_p(x)]) holds exactly: a component's marks are drawn
with E[solid share] = y given its inputs (components.py), its quality q is fixed by its value and the
input type, and the recursion is linear in the parents' shares. The expected reward of an example is the
mean of E[y_k] over the K components. A router's `{"route": "lrf"}` picks per input from the outputs it
sees, so its picks are read from a run (`expected_of_run`): the expectation is then exact given them.
"""
from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from optimas_cli.system import route_of
from pipelines.synthetic.components import instruction, named_value, strategy_of, type_of

__all__ = ["expected_of_run", "expected_reward", "expected_rewards", "expected_score", "name_of", "named_value",
           "optimal_config", "optimum_score", "per_type_best", "route_of", "type_index"]
from pipelines.synthetic.spec import ComponentSpec, Instance


def name_of(spec: ComponentSpec, value, t: int) -> str:
    """The strategy or option a configuration value makes component `spec` use on input type t."""
    if spec.kind == "prompt":
        return strategy_of(value)
    route = route_of(value)
    if route is None:
        return str(value)
    if route == "heuristic":  # the leaderboard's first best, as Component._route's argmax picks it
        return max(spec.values, key=spec.leaderboard.get)
    if route == "best":  # the per-type optimum (what a perfectly aligned router picks)
        return max(spec.values, key=lambda v: spec.q(v, t))
    raise ValueError(f"{spec.name}: a {route!r} route picks from a run's outputs; use expected_of_run")


def expected_reward(instance: Instance, names: Mapping[str, str], t: int) -> float:
    """E[reward] of one example of type index t when each component uses names[component]."""
    c, shares = instance.coupling, []
    for spec in instance.components:  # indices are a topological order (parents come first)
        y = spec.q(names[spec.name], t)
        if spec.parents:
            y *= 1 - c + c * statistics.fmean(shares[p] for p in spec.parents)
        shares.append(y)
    return statistics.fmean(shares)


def type_index(instance: Instance, example: dict) -> int:
    return instance.types.index(type_of(example["request"]))


def expected_rewards(instance: Instance, config: Mapping, examples: Sequence[dict]) -> list[float]:
    """Per example, the exact expected reward of `config` (no `lrf` routes: see expected_of_run)."""
    out = []
    for ex in examples:
        t = type_index(instance, ex)
        out.append(expected_reward(instance, {s.name: name_of(s, config[s.name], t) for s in instance.components}, t))
    return out


def expected_score(instance: Instance, config: Mapping, examples: Sequence[dict]) -> float:
    return statistics.fmean(expected_rewards(instance, config, examples))


def expected_of_run(instance: Instance, examples: Sequence[dict], steps: Sequence[Mapping[str, dict]]) -> float:
    """The exact expected score given what each component did on each example in a run: `steps[i]` maps a
    component to its step ({"outputs": {field: draft}}), as Trajectory.steps and predictions.jsonl.gz hold
    it. Routers' picks are read from the drafts, so `lrf` routes are covered too."""
    scores = []
    for ex, by_component in zip(examples, steps, strict=True):
        names = {s.name: named_value(by_component[s.name]["outputs"][s.field]) for s in instance.components}
        scores.append(expected_reward(instance, names, type_index(instance, ex)))
    return statistics.fmean(scores)


def optimal_config(instance: Instance) -> dict:
    """Every component's best value; a router's best is per input type, which `{"route": "lrf"}` can reach."""
    config = {}
    for spec in instance.components:
        if spec.kind == "route":
            config[spec.name] = {"route": "lrf"}
        else:
            best = max(spec.values, key=lambda v: spec.q(v, 0))
            config[spec.name] = instruction(best) if spec.kind == "prompt" else best
    return config


def per_type_best(instance: Instance) -> dict:
    return {s.name: {t: max(s.values, key=lambda v, i=i: s.q(v, i)) for i, t in enumerate(instance.types)}
            for s in instance.components if s.kind == "route"}


def optimum_score(instance: Instance, examples: Sequence[dict]) -> float:
    """The highest expected score any configuration reaches on `examples` (spec.py: each q at its best)."""
    best = {s.name: ({"route": "best"} if s.kind == "route" else optimal_config(instance)[s.name])
            for s in instance.components}
    return expected_score(instance, best, examples)
