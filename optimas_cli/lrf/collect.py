"""Preference collection (paper Section 4.1): candidate outputs of C_k scored by downstream Monte Carlo.

For component C_k and a batch of training inputs:
  1. run the system up to C_k (and every component that does not depend on C_k, which stays fixed); a
     collection of several components runs what they hold fixed once, as one shared prefix (collect_all);
  2. draw candidate outputs y_k: m values of a choice (or all of them), or m samples of an LM/local model;
  3. for each candidate, run what is downstream r times and average the global reward;
  4. every two candidates of one input whose averages differ by more than epsilon form a pair.
Everything is batched across examples (one downstream run per candidate index and repeat), so the
LM layer sees large batches. Executions are counted by the run's ledger under `ctx.phase`.

The downstream runs decode at `downstream_temperature` (None: the run's own temperature, the one the
system is evaluated at). Candidate i samples at sample index `ctx.sample_index + i` and repeat r at
`ctx.sample_index + r`, so at a temperature above 0 every candidate and repeat is its own seeded sample
(and its own call-cache row); each collection of a run starts at its own `collection_sample_index`,
so Stage 2 re-collecting on Stage 1's inputs draws new samples. When nothing downstream can
vary at that temperature (greedy decoding, no component with randomness of its own), repeats could
only replay the first run: the candidates run downstream once. The paper's accounting charges every
candidate drawn and its first downstream run (system/ledger.py), whether or not it formed a pair. Likewise a
candidate temperature of 0 draws one sample, not `num_candidates` copies of it.

A choice draws `num_candidates` of its values per input (`choices="sample"`, the default), so a
collection costs the same whatever the number of values: the reward model must generalize to the
value-input combinations it was not shown anyway, which is why it is trained at all. The draw is
balanced (every value is drawn equally often across the inputs, to within one) and seeded by the run
seed, the collection's sample index and the component. `choices="enumerate"` runs every value on
every input (exhaustive: its cost grows with the number of values, as coordinate ascent's does).

Given `exact_reward` (lrf.collect.labels=exact, lrf/stage.py), the pairs are formed exactly as above, at the
same cost, but each is ordered by the exact expected reward of its two candidates, and dropped when those
tie: the LRF learns from the true order of the very pairs Monte Carlo labels, the labels' noise removed.
"""
from __future__ import annotations

import copy
import json
import logging
import math
import random
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import combinations
from typing import Any

from optimas_cli.errors import UserError
from optimas_cli.lrf.pairs import PreferencePair
from optimas_cli.progress import track
from optimas_cli.system.component import Component, ConfigKind
from optimas_cli.system.compound import CompoundSystem, Trajectory
from optimas_cli.system.configuration import SystemConfig
from optimas_cli.system.context import RunContext
from optimas_cli.system.pipeline import Metric

log = logging.getLogger(__name__)

COLLECTION_PHASE = "lrf_collection"  # Stage 1; Stage 2's fresh pairs count under "adaptation"
SAMPLES_PER_COLLECTION = 1 << 16  # sample indices one collection may use (candidates, downstream repeats)

CHOICE_MODES = ("sample", "enumerate")  # lrf.collect.choices
CANDIDATE_TEMPERATURE = 1.0  # lrf.collect.temperature when the config leaves it out
EXACT_TIE = 1e-12  # exact rewards this close have no order (as label_quality.label_agreement counts exact ties)

MetricFn = Callable[[dict, dict], float]
# E[global reward | the component received x and wrote y], the rest under the configuration: (component, config, x, y)
ExactReward = Callable[[str, SystemConfig, dict, dict], float]


def as_metric(metric: Metric | MetricFn) -> Metric:
    """A plain reward function works too; a pipeline's Metric may score a whole batch at once
    (BigCodeBench runs the candidates' tests in parallel)."""
    return metric if isinstance(metric, Metric) else Metric("reward", metric)


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _same_output(a: dict, b: dict) -> bool:
    return _key(a) == _key(b)


def held_fixed(system: CompoundSystem, name: str) -> list[str]:
    """The components a collection for `name` runs once and holds fixed across its candidates: every one that
    does not depend on it (its ancestors and parallel branches; paper: "outputs from the non-downstream
    components fixed"), in order. The set is closed under ancestors, so it runs on its own."""
    moved = {name, *system.downstream(name)}
    return [n for n in system.order if n not in moved]


def shared_prefix(system: CompoundSystem, names: Sequence[str]) -> list[str]:
    """What collecting `names` runs before any candidate: the union of their held-fixed components, each once.
    Under one configuration, context and sample index a component's output on an input is the same in every
    component's prefix (its randomness is keyed by run seed, example, component and sample index), so one run
    of the union serves every collection (prefix_for) instead of one run of its own per component."""
    wanted = {c for name in names for c in held_fixed(system, name)}
    return [n for n in system.order if n in wanted]


def prefix_for(system: CompoundSystem, name: str, base: Sequence[Trajectory]) -> list[Trajectory]:
    """Copies of the shared prefix's trajectories as run_until(name) would leave them: `name` and what is
    downstream of it forgotten."""
    moved = {name, *system.downstream(name)}
    trajs = [copy.deepcopy(t) for t in base]
    for t in trajs:
        for n in moved & set(t.steps):
            for f in system.components[n].outputs:
                t.state.pop(f, None)
            del t.steps[n]
    return trajs


def balanced_draws(n_values: int, n_inputs: int, per_input: int, seed: str) -> list[list[int]]:
    """For each of n_inputs inputs, the indices of `per_input` distinct values (all when there are
    fewer): each input takes the values drawn least often so far, ties broken by a seeded shuffle, so
    every value's count stays within one of every other's and values meet one another in varied sets."""
    rng = random.Random(seed)
    counts = [0] * n_values
    draws = []
    for _ in range(n_inputs):
        picked = sorted(sorted(range(n_values), key=lambda j: (counts[j], rng.random()))[:per_input])
        for j in picked:
            counts[j] += 1
        draws.append(picked)
    return draws


def _choice_draws(comp: Component, inputs: list[dict], ctx: RunContext, num_candidates: int,
                  choices: str) -> list[tuple[Any, list[int], list[dict]]]:
    """(value, the inputs it runs on, their outputs) for each value of a choice drawn on some input."""
    values = comp.candidate_values()
    if choices == "enumerate":
        return [(value, list(range(len(inputs))), comp.execute(inputs, value, ctx)) for value in values]
    drawn = balanced_draws(len(values), len(inputs), num_candidates, f"{ctx.seed}:{ctx.sample_index}:{comp.name}")
    if len(inputs) * num_candidates < len(values):
        log.warning("%s: %d inputs x %d candidates leave %d of its %d values undrawn; the reward model must score "
                    "them unseen (raise lrf.collect.num_candidates or the training inputs to cover them)",
                    comp.name, len(inputs), num_candidates, len(values) - len(inputs) * num_candidates, len(values))
    out = []
    for j, value in enumerate(values):
        rows = [i for i, picked in enumerate(drawn) if j in picked]
        if rows:
            out.append((value, rows, comp.execute([inputs[i] for i in rows], value, ctx)))
    return out


def _draw_candidates(
    comp: Component,
    inputs: list[dict],
    config: SystemConfig,
    ctx: RunContext,
    num_candidates: int,
    temperature: float,
    diverse: bool,
    choices: str = "sample",
) -> tuple[list[list[dict]], list[list[Any]]]:
    """Per input, the list of candidate outputs, and the choice value behind each (None for samples)."""
    if comp.kind is ConfigKind.CHOICE:
        draws = _choice_draws(comp, inputs, ctx, num_candidates, choices)
    else:  # PROMPT / WEIGHTS: samples of the component under its current configuration
        if not comp.is_stochastic(temperature):
            num_candidates = 1  # greedy samples are copies of one another
        everyone = list(range(len(inputs)))
        draws = [
            (None, everyone, comp.execute(inputs, config[comp.name], ctx.replace(temperature=temperature, sample_index=ctx.sample_index + i)))
            for i in range(num_candidates)
        ]
    candidates: list[list[dict]] = [[] for _ in inputs]
    values: list[list[Any]] = [[] for _ in inputs]
    for value, rows, outputs in draws:
        ctx.ledger.record(comp.name, len(rows), ctx.phase)
        for i, out in zip(rows, outputs, strict=True):
            if diverse and any(_same_output(out, seen) for seen in candidates[i]):
                continue
            candidates[i].append(out)
            values[i].append(value)
    return candidates, values


def collection_sample_index(collection: int) -> int:
    """The first sample index of a run's collection number `collection` (0: Stage 1, n: Stage 2's n-th)."""
    return collection * SAMPLES_PER_COLLECTION


def decoding_temperature(ctx: RunContext, override: float | None = None) -> float:
    """The temperature LM calls decode at: `override`, else the context's, else the LM's default."""
    for value in (override, ctx.temperature, getattr(ctx.lm, "temperature", None)):
        if value is not None:
            return float(value)
    return 0.0


def _downstream_is_stochastic(system: CompoundSystem, name: str, temperature: float) -> bool:
    return any(system.components[n].is_stochastic(temperature) for n in system.downstream(name))


def collect_pairs(
    system: CompoundSystem,
    config: SystemConfig,
    component_name: str,
    examples: Sequence[dict],
    ctx: RunContext,
    metric: Metric | MetricFn,
    num_candidates: int = 4,
    mc_repeats: int = 2,
    epsilon: float = 0.0,
    temperature: float = CANDIDATE_TEMPERATURE,
    diverse: bool = True,
    downstream_temperature: float | None = None,
    choices: str = "sample",
    exact_reward: ExactReward | None = None,
    stats: dict | None = None,
    prefix: list[Trajectory] | None = None,
) -> list[PreferencePair]:
    """Preference pairs for one component over `examples` (see the module docstring).

    CHOICE components draw `num_candidates` values per input, balanced across the inputs
    (`choices="sample"`), or run every value on every input (`choices="enumerate"`).
    PROMPT/WEIGHTS components draw `num_candidates` samples at `temperature`, keeping distinct
    outputs only when `diverse`. NONE components have nothing to optimize and yield no pairs. Downstream runs decode at `downstream_temperature` (None:
    the run's own); `mc_repeats` drops to 1 when nothing downstream can vary at it. Two candidates
    with identical outputs never form a pair (there is nothing to rank). `exact_reward`, if given, orders
    each pair instead of the Monte Carlo means (module docstring). `stats`, if given, is updated with counts
    of examples, candidates, pairs, near-ties, exact ties and the repeats run. `prefix`: the examples' trajectories
    with the held-fixed components already run (collect_all's shared prefix, prefix_for); None runs them here.
    """
    if component_name not in system.components:
        raise UserError(f"no component named {component_name!r}", f"choose one of {list(system.components)}")
    comp = system.components[component_name]
    if comp.kind is ConfigKind.NONE:
        return []
    if num_candidates < 1 or mc_repeats < 1:
        raise UserError("num_candidates and mc_repeats must be at least 1", "fix lrf.collect in the config")
    if max(num_candidates, mc_repeats) > SAMPLES_PER_COLLECTION:
        raise UserError(f"lrf.collect asks for {max(num_candidates, mc_repeats)} samples per input",
                        f"use at most {SAMPLES_PER_COLLECTION} candidates and repeats")
    if choices not in CHOICE_MODES:
        raise UserError(f"lrf.collect.choices is {choices!r}", f"use one of {', '.join(CHOICE_MODES)}")
    if downstream_temperature is not None and downstream_temperature < 0:
        raise UserError(f"lrf.collect.downstream_temperature is {downstream_temperature}, below 0",
                        "set it to null (the run's own temperature) or a number >= 0")
    score = as_metric(metric)
    trajs = prefix if prefix is not None else system.run_components(
        system.start(examples), held_fixed(system, component_name), config, ctx)

    # Inputs of C_k per example; skip examples where C_k does not run (its `when` is false).
    active = []
    for idx, t in enumerate(trajs):
        x_k = {f: t.state.get(f) for f in comp.inputs}
        if comp.when is None or comp.when(x_k):
            active.append((idx, x_k))
    if not active:
        ctx.ledger.record_pairs(component_name, 0, ctx.phase)
        return []
    inputs = [x for _, x in active]
    candidates, values = _draw_candidates(comp, inputs, config, ctx, num_candidates, temperature, diverse, choices)

    down_temperature = decoding_temperature(ctx, downstream_temperature)
    repeats = mc_repeats if _downstream_is_stochastic(system, component_name, down_temperature) else 1
    down_ctx = ctx if downstream_temperature is None else ctx.replace(temperature=float(downstream_temperature))
    scores: list[list[list[float]]] = [[[] for _ in cands] for cands in candidates]
    # Every candidate of every input runs downstream in one batch (an LM call's key does not depend on its batch):
    # with few inputs, one candidate at a time left the embedded model decoding a few rows a step.
    runs = [(a, j) for a, cands in enumerate(candidates) if len(cands) >= 2 for j in range(len(cands))]
    base = [trajs[active[a][0]] for a, _ in runs]
    outs = [candidates[a][j] for a, j in runs]
    for rep in track(range(repeats if runs else 0), f"{ctx.phase} · {component_name} downstream runs", lm=ctx.lm):
        finished = system.run_after(
            component_name, base, outs, config,
            down_ctx.replace(sample_index=ctx.sample_index + rep, charged=ctx.charged and rep == 0),
        )  # the paper charges each candidate's downstream run once; its repeats are executed only
        rewards = score.many([t.example for t in finished], [t.final(system.outputs) for t in finished])
        for (a, j), reward in zip(runs, rewards, strict=True):
            scores[a][j].append(reward)

    pairs: list[PreferencePair] = []
    near_ties = identical = exact_ties = 0
    for a, (_, x_k) in enumerate(active):
        means = [statistics.fmean(s) for s in scores[a] if s]
        exact = (None if exact_reward is None or len(means) < 2
                 else [exact_reward(component_name, config, x_k, y) for y in candidates[a]])
        order = means if exact is None else exact  # what orders a pair
        for p, q in combinations(range(len(means)), 2):
            if _same_output(candidates[a][p], candidates[a][q]):
                identical += 1
                continue
            if abs(means[p] - means[q]) <= epsilon:
                near_ties += 1
                continue
            if exact is not None and abs(exact[p] - exact[q]) < EXACT_TIE:
                exact_ties += 1
                continue
            hi, lo = (p, q) if order[p] > order[q] else (q, p)
            meta = {}
            if comp.kind is ConfigKind.CHOICE:
                meta = {"chosen_value": values[a][hi], "rejected_value": values[a][lo]}
            pairs.append(
                PreferencePair(component_name, dict(x_k), dict(candidates[a][hi]), dict(candidates[a][lo]),
                               order[hi], order[lo], meta)
            )
    ctx.ledger.record_pairs(component_name, len(pairs), ctx.phase)
    if stats is not None:
        stats["examples"] = stats.get("examples", 0) + len(active)
        stats["candidates"] = stats.get("candidates", 0) + sum(len(c) for c in candidates)
        stats["pairs"] = stats.get("pairs", 0) + len(pairs)
        stats["near_ties"] = stats.get("near_ties", 0) + near_ties
        if exact_reward is not None:
            stats["exact_ties"] = stats.get("exact_ties", 0) + exact_ties
        stats["identical_outputs"] = stats.get("identical_outputs", 0) + identical
        stats["mc_repeats"] = repeats  # what was run, not what was asked for
        if comp.kind is ConfigKind.CHOICE:  # how many of the choice's values the candidates covered
            stats["values"] = len(comp.candidate_values())
            stats["values_drawn"] = len({_key(v) for vals in values for v in vals})
    log.info("%s: %d pairs from %d inputs (%d within epsilon)", component_name, len(pairs), len(active), near_ties)
    return pairs


def optimizable_components(system: CompoundSystem) -> list[str]:
    """Components with something to optimize (not NONE), in topological order."""
    return [n for n in system.order if system.components[n].kind is not ConfigKind.NONE]


def collect_all(
    system: CompoundSystem,
    config: SystemConfig,
    examples: Sequence[dict],
    ctx: RunContext,
    metric: Metric | MetricFn,
    components: Iterable[str] | None = None,
    on_pairs: Callable[[str, list[PreferencePair]], None] | None = None,
    stats: dict | None = None,
    before: Callable[[str], None] | None = None,
    **options: Any,
) -> dict[str, list[PreferencePair]]:
    """Pairs for every optimizable component (or those named), calling `on_pairs(name, pairs)`
    after each so the caller can persist progress and resume by passing the remaining names, and
    `before(runs)` before the shared prefix and before each component's candidates (a run cap's check of the
    executed runs the step is about to take, by expected_collection's arithmetic: an upper bound).

    The components every collection holds fixed run once, as one shared prefix (shared_prefix), not once per
    component. `options` are collect_pairs' keyword arguments (num_candidates, mc_repeats, epsilon, ...);
    `stats`, if given, maps each component name to its collection counts.
    """
    names = optimizable_components(system) if components is None else list(components)
    unknown = [n for n in names if n not in system.components]
    if unknown:
        raise UserError(f"unknown component(s) {unknown}", f"choose among {list(system.components)}")
    result: dict[str, list[PreferencePair]] = {}
    collecting = [n for n in names if system.components[n].kind is not ConfigKind.NONE]
    if before is not None:
        before(expected_prefix_runs(system, config, collecting, len(examples)))
    base = system.run_components(system.start(examples), shared_prefix(system, collecting), config, ctx)
    temperature = decoding_temperature(ctx)
    for name in names:
        if before is not None:
            tally = ExecutionTally()
            expected_collection(system, config, len(examples), options, tally, temperature, [name], prefix=False)
            before(tally.executions / len(system))
        counts: dict = {}
        result[name] = collect_pairs(system, config, name, examples, ctx, metric, stats=counts,
                                     prefix=prefix_for(system, name, base), **options)
        if stats is not None:
            stats[name] = counts
        if on_pairs is not None:
            on_pairs(name, result[name])
    return result


# -- what a collection will execute, before it runs (optimas plan; Stage 2 under a run cap) -------------
class ExecutionTally:
    """Counts component executions. Any counter with this `run` serves (optimas plan's PhaseCount, per phase)."""

    def __init__(self) -> None:
        self.executions = 0.0

    def run(self, comp: Component, n: float, values_per_input: float = 1.0) -> None:
        """n inputs through `comp`; a routing policy runs every value on each."""
        self.executions += n * values_per_input


def _candidate_count(comp: Component, collect: Mapping) -> int:
    drawn = int(collect.get("num_candidates", 4))
    if comp.kind is not ConfigKind.CHOICE:
        return drawn
    values = len(comp.candidate_values())
    return values if collect.get("choices", "sample") == "enumerate" else min(drawn, values)


def expected_prefix_runs(system: CompoundSystem, config: SystemConfig, names: Sequence[str], n: int) -> float:
    """The executed runs of the shared prefix collecting `names` on n inputs takes (collect_all)."""
    tally = ExecutionTally()
    for other in shared_prefix(system, names):
        tally.run(system.components[other], n, system.components[other].values_per_input(config[other]))
    return tally.executions / len(system)


def expected_collection(system: CompoundSystem, config: SystemConfig, n: int, collect: Mapping,
                        counter: ExecutionTally, lm_temperature: float, names: Sequence[str] | None = None,
                        prefix: bool = True) -> float:
    """collect_all of `names` (None: every optimizable component) on n inputs, counted into `counter` as it will
    execute when every sampled candidate is distinct (an upper bound otherwise); returns the expected number of
    preference pairs. `collect`: the lrf.collect settings; `lm_temperature`: the run's own, which the downstream
    runs default to. `prefix`: count the shared prefix too (once, however many components share it)."""
    names = optimizable_components(system) if names is None else [
        c for c in names if system.components[c].kind is not ConfigKind.NONE]
    pairs = 0.0
    sample_at = float(collect.get("temperature", CANDIDATE_TEMPERATURE))
    down_at = collect.get("downstream_temperature")
    down_at = lm_temperature if down_at is None else float(down_at)
    if prefix:
        for other in shared_prefix(system, names):
            counter.run(system.components[other], n, system.components[other].values_per_input(config[other]))
    for name in names:
        comp = system.components[name]
        down = system.downstream(name)
        cands = _candidate_count(comp, collect) if comp.kind is ConfigKind.CHOICE or comp.is_stochastic(sample_at) else 1
        counter.run(comp, cands * n)  # candidate draws: each drawn value (choice) or sample (prompt, weights) once
        stochastic = any(system.components[d].is_stochastic(down_at) for d in down)
        repeats = int(collect.get("mc_repeats", 2)) if stochastic else 1
        if cands >= 2:
            for d in down:
                counter.run(system.components[d], cands * repeats * n, system.components[d].values_per_input(config[d]))
        pairs += n * math.comb(cands, 2)
    return pairs
