"""Exact expected scores of the simulator (spec.py's model), its optimum, and its perfect local reward.

E[y_k(x)] follows from spec.Instance.share applied to the parents' expected shares: a component's marks
are drawn with E[solid share] = y given its inputs (components.py), and y is linear in the parents'
shares once every value is fixed. The expected reward of an example is the mean of E[y_k] over the K
components (metric=mean), or E[y_K-1] of the last component, the sink, alone (metric=sink). A router's
`{"route": "lrf"}` picks per input from the outputs it sees, so its picks are read from a run
(`expected_of_run`): the expectation is then exact given them.

The optimum. interaction=none: every component at its best value, per input type for a router
(spec.py: the reward is a polynomial with nonnegative coefficients in the q's, so it rises with every
q; under metric=sink those of the sink and the components feeding it, and the others' q's do not occur
in it, so their best values are as good as any). interaction=on: the sum of E[y_k] over the components
the metric counts (every one, or the sink) equals sum_k W_k * own_k, where own_k is the first term of
spec.py's y_k (its own quality times its fit with its parents' values) and
W_k = [the metric counts k] + sum over children j of coupling / |parents of j| * W_j (unroll the linear
recursion), so the expected reward (that sum over K under mean) is a sum of terms over single
components and parent-child pairs. `solve` maximizes it exactly by variable elimination (max-sum): one
variable per prompt or global choice (shared by every input type), one per router and input type (a
router may pick per input, and its input names the type and its parents' values). A chain or a stack of
diamonds stays small; a tree of routers whose neighbours are global components may not (it refuses
one-line then).
"""
from __future__ import annotations

import json
import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np

from optimas_cli.errors import UserError
from optimas_cli.system import LRF_ROUTE, route_of
from optimas_cli.system.component import LRF_ROUTES
from optimas_pipelines.synthetic.components import instruction, named_value, solid_share, strategy_of, type_of
from optimas_pipelines.synthetic.spec import ComponentSpec, Instance

__all__ = ["LocalRewardOracle", "expected_of_run", "expected_reward", "expected_rewards", "expected_score",
           "best_values", "name_of", "named_value", "names_for", "optimal_config", "optimum_score", "per_type_best", "route_of",
           "solve", "type_index"]

MAX_FACTOR = 2 ** 24  # entries of the largest table elimination may build (128 MiB of float64)
FREE_ROUTES = ("best",)  # routes the exact model chooses optimally (a perfect router); LRF routes too for the oracle


def name_of(spec: ComponentSpec, value, t: int) -> str:
    """The strategy or option a configuration value makes component `spec` use on input type t. A `best`
    route here is interaction=none's per-type best; `names_for` resolves it in both modes."""
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


def expected_reward(instance: Instance, names: Mapping[str, str], t: int,
                    observed: Mapping[int, float] | None = None) -> float:
    """E[reward] of one example of type index t when each component uses names[component]; `observed`
    fixes some components' solid shares (index -> share) to ones a run realized."""
    shares: list[float] = []
    for spec in instance.components:  # indices are a topological order (parents come first)
        if observed and spec.index in observed:
            shares.append(observed[spec.index])
            continue
        parents = [(names[instance.components[p].name], shares[p]) for p in spec.parents]
        shares.append(instance.share(spec, names[spec.name], t, parents))
    return shares[-1] if instance.metric == "sink" else statistics.fmean(shares)


def type_index(instance: Instance, example: dict) -> int:
    return instance.types.index(type_of(example["request"]))


def names_for(instance: Instance, config: Mapping, t: int, fixed: Mapping[str, str] | None = None,
              free_routes: Sequence[str] = FREE_ROUTES, cache: dict | None = None) -> dict:
    """Every component's value on input type t under `config`; `fixed` overrides some. A router whose
    route is in `free_routes` picks optimally given all the others (interaction=none: its per-type best).
    Under interaction=on, free routers that read from one another pick jointly; such a group's picks
    depend only on the values of the components next to it, which `cache` (if given) keys them by."""
    fixed = dict(fixed or {})
    free = [s for s in instance.components
            if s.name not in fixed and s.kind == "route" and route_of(config[s.name]) in free_routes]
    free_names = {s.name for s in free}
    for spec in instance.components:
        if spec.name not in fixed and spec.name not in free_names:
            fixed[spec.name] = name_of(spec, config[spec.name], t)
    if instance.interaction == "none":
        return {**fixed, **{s.name: max(s.values, key=lambda v, s=s: s.q(v, t)) for s in free}}
    names = dict(fixed)
    for group, boundary in router_groups(instance, free):
        key = (group, t, tuple((b, fixed[b]) for b in boundary))
        if cache is None or key not in cache:
            # the other free routers touch no factor of this group: any value of theirs gives its picks
            others = {s.name: s.values[0] for s in free if s.name not in group}
            best = solve(instance, {t: 1.0}, {**fixed, **others}, per_type=set(group))[1]
            picks = {name: best[name][t] for name in group}
            if cache is None:
                names.update(picks)
                continue
            cache[key] = picks
        names.update(cache[key])
    return names


def router_groups(instance: Instance, free: Sequence[ComponentSpec]) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """The free routers connected through parent-child edges among them, each group with the components
    next to it (its boundary)."""
    by_name = {s.name: s for s in instance.components}
    neighbours = {s.name: set() for s in instance.components}
    for s in instance.components:
        for p in s.parents:
            neighbours[s.name].add(instance.components[p].name)
            neighbours[instance.components[p].name].add(s.name)
    free_names, seen, groups = {s.name for s in free}, set(), []
    for s in free:
        if s.name in seen:
            continue
        group, todo = [], [s.name]
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            group.append(name)
            todo += [n for n in neighbours[name] if n in free_names]
        boundary = sorted(set().union(*(neighbours[n] for n in group)) - set(group), key=lambda n: by_name[n].index)
        groups.append((tuple(sorted(group)), tuple(boundary)))
    return groups


def expected_rewards(instance: Instance, config: Mapping, examples: Sequence[dict]) -> list[float]:
    """Per example, the exact expected reward of `config` (no `lrf` routes: see expected_of_run)."""
    by_type: dict[int, dict] = {}
    out = []
    for ex in examples:
        t = type_index(instance, ex)
        if t not in by_type:
            by_type[t] = names_for(instance, config, t)
        out.append(expected_reward(instance, by_type[t], t))
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


def exact_given_output(instance: Instance, config: Mapping, component: str, x: dict, y: dict) -> float:
    """E[reward | component received x and wrote y], every other component under `config`: k's parents'
    values and solid shares read from x, k's own from y (label_quality.py's docstring says why that orders
    a preference pair exactly)."""
    spec = next(s for s in instance.components if s.name == component)
    t = type_index(instance, x)
    parents = [instance.components[p] for p in spec.parents]
    fixed = {p.name: named_value(x[p.field] or "") for p in parents}
    fixed[component] = named_value(y[spec.field] or "")
    observed = {p.index: solid_share(x[p.field]) for p in parents}
    observed[spec.index] = solid_share(y[spec.field])
    return expected_reward(instance, names_for(instance, config, t, fixed), t, observed)


# -- the optimum -----------------------------------------------------------------------------------

def type_weights(instance: Instance, examples: Sequence[dict] | None) -> dict[int, float]:
    """Each input type's share of `examples` (None: the uniform draw the splits come from)."""
    if examples is None:
        return {t: 1 / len(instance.types) for t in range(len(instance.types))}
    counts = Counter(type_index(instance, ex) for ex in examples)
    return {t: n / len(examples) for t, n in sorted(counts.items())}


def best_values(instance: Instance, examples: Sequence[dict] | None = None) -> dict:
    """The values of the optimum on `examples`: a global component's value, a router's value per input type
    (metric=sink: those of the components that do not feed the sink are arbitrary, as any value is)."""
    weights = type_weights(instance, examples)
    if instance.interaction == "on":
        return solve(instance, weights, {}, per_type={s.name for s in instance.components if s.kind == "route"})[1]
    return {s.name: {t: max(s.values, key=lambda v, t=t: s.q(v, t)) for t in weights} if s.kind == "route"
            else max(s.values, key=lambda v: s.q(v, 0)) for s in instance.components}


def optimal_config(instance: Instance) -> dict:
    """Every component's best value; a router's best is per input (its type, and under interaction=on
    its parents' values), which `{"route": "lrf"}` can reach."""
    best = best_values(instance)
    return {s.name: dict(LRF_ROUTE) if s.kind == "route" else instruction(best[s.name]) if s.kind == "prompt"
            else best[s.name] for s in instance.components}


def per_type_best(instance: Instance) -> dict:
    best = best_values(instance)
    return {s.name: {instance.types[t]: v for t, v in best[s.name].items()}
            for s in instance.components if s.kind == "route"}


def optimum_score(instance: Instance, examples: Sequence[dict]) -> float:
    """The highest expected score any configuration reaches on `examples`."""
    if instance.interaction == "on":
        per_type = {s.name for s in instance.components if s.kind == "route"}
        return solve(instance, type_weights(instance, examples), {}, per_type)[0]
    best = {s.name: ({"route": "best"} if s.kind == "route" else optimal_config(instance)[s.name])
            for s in instance.components}
    return expected_score(instance, best, examples)


def downstream_weights(instance: Instance) -> list[float]:
    """W_k = [the metric counts k] + sum over children j of coupling / |parents of j| * W_j (module
    docstring): every component counts under metric=mean, the sink (the last) alone under sink."""
    last = len(instance.components) - 1
    weights = [1.0 if instance.metric == "mean" or k == last else 0.0 for k in range(last + 1)]
    for spec in reversed(instance.components):
        for p in spec.parents:
            weights[p] += instance.coupling / len(spec.parents) * weights[spec.index]
    return weights


def solve(instance: Instance, weights: Mapping[int, float], fixed: Mapping[str, str],
          per_type: set[str]) -> tuple[float, dict]:
    """interaction=on: max over the values of every component not in `fixed` (a component in `per_type`
    may take one value per input type) of sum_t weights[t] * E[reward | type t]; (that maximum, the
    values: name -> value, or name -> {t: value} for a per-type component). Terms between fixed
    components alone are left out (they change no argmax): with `fixed`, the maximum lacks them."""
    specs, c = instance.components, instance.coupling
    n = len(specs) if instance.metric == "mean" else 1  # the reward divides the weighted sum by n
    big_w = downstream_weights(instance)

    def var(spec: ComponentSpec, t: int):
        return None if spec.name in fixed else (spec.name, t if spec.name in per_type else None)

    factors: list[tuple[tuple, np.ndarray]] = []
    domains: dict = {}
    for t, w in weights.items():
        for spec in specs:
            touching = [var(spec, t), *(var(specs[p], t) for p in spec.parents)]
            if all(v is None for v in touching):
                continue
            if var(spec, t) is not None:
                domains[var(spec, t)] = spec.values
            if not big_w[spec.index]:  # metric=sink: k does not feed the sink; no factor keeps tables small
                continue
            own = np.array([spec.q(fixed[spec.name], t)]) if spec.name in fixed else spec.quality_table[:, t]
            scale = w * big_w[spec.index] / n
            if not spec.parents:
                factors.append(scoped([var(spec, t)], scale * own))
            for i, p in enumerate(spec.parents):
                table = scale * (1 - c) / len(spec.parents) * fit_table(spec, i, specs[p], fixed) * own[None, :]
                factors.append(scoped([var(specs[p], t), var(spec, t)], table))
    score, assignment = max_sum(factors, {v: len(d) for v, d in domains.items()})
    best: dict = {}
    for (name, t), i in assignment.items():
        value = domains[(name, t)][i]
        if t is None:
            best[name] = value
        else:
            best.setdefault(name, {})[t] = value
    return score, best


def candidates(spec: ComponentSpec, fixed: Mapping[str, str]) -> list[str]:
    return [fixed[spec.name]] if spec.name in fixed else list(spec.values)


def fit_table(spec: ComponentSpec, i: int, parent: ComponentSpec, fixed: Mapping[str, str]) -> np.ndarray:
    """m_kp over [parent candidate, candidate], from the precomputed table where the values are the tables'."""
    if spec.name not in fixed and parent.name not in fixed:
        return spec.fit_tables[i]
    if spec.name not in fixed and fixed[parent.name] in parent.values:
        return spec.fit_tables[i][[parent.values.index(fixed[parent.name])], :]
    if parent.name not in fixed and fixed[spec.name] in spec.values:
        return spec.fit_tables[i][:, [spec.values.index(fixed[spec.name])]]
    return np.array([[spec.fit(i, u, v) for v in candidates(spec, fixed)] for u in candidates(parent, fixed)])


def scoped(scope: list, table: np.ndarray) -> tuple[tuple, np.ndarray]:
    """A factor over the free variables of `scope` (None marks a fixed one, whose axis has length 1)."""
    fixed_axes = tuple(i for i, v in enumerate(scope) if v is None)
    return tuple(v for v in scope if v is not None), table.squeeze(axis=fixed_axes)


def max_sum(factors: list[tuple[tuple, np.ndarray]], sizes: Mapping) -> tuple[float, dict]:
    """Max of a sum of factors over discrete variables by variable elimination (greedy smallest table
    first), and an argmax: variable -> index."""
    factors = merge_same_scope(factors)
    trace = []
    remaining = set(sizes)
    while remaining:
        x = min(sorted(remaining, key=str), key=lambda v: table_size(v, factors, sizes))
        if table_size(x, factors, sizes) > MAX_FACTOR:
            raise UserError(f"pipeline.interaction=on: the exact optimum of this instance needs a table of "
                            f"{table_size(x, factors, sizes):,} entries", "use fewer pipeline.options, or shape chain or diamond")
        touching = [f for f in factors if x in f[0]]
        factors = [f for f in factors if x not in f[0]]
        scope = sorted(set().union(*(s for s, _ in touching)) - {x}, key=str)
        full = [x, *scope]
        total = np.zeros([sizes[u] for u in full])
        for s, table in touching:
            order = sorted(range(len(s)), key=lambda i: full.index(s[i]))
            shape = [sizes[u] if u in s else 1 for u in full]
            total = total + np.transpose(table, order).reshape(shape)
        trace.append((x, tuple(scope), total.argmax(axis=0)))
        factors.append((tuple(scope), total.max(axis=0)))
        remaining.discard(x)
    score = float(sum(table for s, table in factors if not s))
    assignment: dict = {}
    for x, scope, best in reversed(trace):
        assignment[x] = int(best[tuple(assignment[u] for u in scope)])
    return score, assignment


def table_size(v, factors: list[tuple[tuple, np.ndarray]], sizes: Mapping) -> int:
    """Entries of the table that eliminating v builds (Python ints: 128 ** 9 overflows int64)."""
    return math.prod(sizes[u] for u in set().union(*(s for s, _ in factors if v in s)) | {v})


def merge_same_scope(factors: list[tuple[tuple, np.ndarray]]) -> list[tuple[tuple, np.ndarray]]:
    """Factors over the same variables (in the same order) added into one."""
    merged: dict[tuple, np.ndarray] = {}
    for scope, table in factors:
        merged[scope] = merged[scope] + table if scope in merged else np.asarray(table, dtype=float)
    return list(merged.items())


# -- the perfect local reward ----------------------------------------------------------------------

class LocalRewardOracle:
    """r_k(x, y) := E[reward | k received x, k did what its output y names], every other component
    under the current configuration, routers that pick per input (`lrf` or `best`) picking optimally
    given the rest. Exact: k's parents' values and solid shares are read from x (its realized inputs),
    its own value from y, and the rest follows the expected recursion. The draft's own marks are noise
    about the value it names, so two outputs of the same value score alike (what the benchmark's
    expected score credits). Components that neither feed k nor read from it add the same amount to
    every output of k on x (metric=sink: nothing, and every output of a k that does not feed the sink
    scores alike): the ranking of k's outputs is that of the exact expected reward."""

    def __init__(self, instance: Instance):
        self.instance = instance
        self.by_name = {s.name: s for s in instance.components}
        self._names: dict = {}
        self._groups: dict = {}  # router groups' picks by their neighbours' values (names_for)

    def score(self, component: str, config: Mapping, inputs: Sequence[dict], outputs: Sequence[dict]) -> list[float]:
        inst, spec = self.instance, self.by_name[component]
        key = json.dumps({n: config[n] for n in self.by_name}, sort_keys=True, default=str)
        scores = []
        for x, y in zip(inputs, outputs, strict=True):
            t = type_index(inst, x)
            parents = [inst.components[p] for p in spec.parents]
            fixed = {p.name: named_value(x[p.field] or "") for p in parents}
            fixed[component] = named_value(y[spec.field] or "")
            names_key = (key, t, tuple(sorted(fixed.items())))
            if names_key not in self._names:
                self._names[names_key] = names_for(inst, config, t, fixed, ("best", *LRF_ROUTES), self._groups)
            observed = {p.index: solid_share(x[p.field]) for p in parents}
            scores.append(expected_reward(inst, self._names[names_key], t, observed))
        return scores

    def score_values(self, component: str, config: Mapping, inputs: Sequence[dict], values: Sequence) -> list[list[float]]:
        """score() of each value on each input (rows: inputs), before anything runs: an output is scored by the
        value it names alone (its marks are noise about that value), so a draft naming the value stands in."""
        field = self.by_name[component].field
        columns = [self.score(component, config, inputs, [{field: f"{v} on "}] * len(inputs)) for v in values]
        return [list(row) for row in zip(*columns, strict=True)] if columns else [[] for _ in inputs]
