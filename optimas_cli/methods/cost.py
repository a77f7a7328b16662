"""What a method expects to execute, before it runs: per phase, component executions, LM calls and other work.

Each method's `estimate` (methods/base.py) counts its own optimization with these pieces; `optimas plan`
(flows/plan.py) adds the final validation and the test, and turns the counts into runs, tokens, dollars
and seconds. Equivalent system runs follow from the budget and the pipeline's wiring by the same
arithmetic the run's ledger counts with (lrf/collect.py, optim/loop.py, system/ledger.py): a phase's runs
are its (component, input) executions divided by the number of components.

What no plan can know is assumed, and each estimate says what it assumed: Algorithm 1 accepts the first
proposal for each component and rejects every later one (on the deterministic toys this reproduces the
executed runs exactly); a search that ends when nothing improves runs the sweeps, rounds or trials its
settings allow.
"""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from optimas_cli.lrf.collect import expected_collection, optimizable_components
from optimas_cli.lrf.judge import JUDGE_COMPONENT
from optimas_cli.lrf.sizing import size_collection, stage1_limit
from optimas_cli.optim.race import example_runs
from optimas_cli.optim.settings import RaceSettings, typed
from optimas_cli.system import CompoundSystem, Pipeline, Splits
from optimas_cli.system.component import Component, ConfigKind
from optimas_cli.system.ledger import SEARCH_SAMPLE_PHASE

PHASES = ("lrf_collection", "lrf_training", "lrf_judge", "reference_collection", "local_optimization",
          SEARCH_SAMPLE_PHASE, "validation", "adaptation", "final_validation", "test", "test_initial")
COLLECTION_PHASES = ("lrf_collection", "adaptation")  # Stage 1's and Stage 2's preference collection
# Work that is not a component execution, timed per unit (flows/plan.py): an LRF training step, a completion a
# LoRA adapter is trained on (GRPO in the weights optimizer: steps x prompts x generations; SysDPO's and
# REINFORCE's rollouts of a trainable node).
LRF_STEP, WEIGHTS_SAMPLE = "lrf_step", "weights_sample"
LRF_PAIRS = "lrf_pairs"  # Stage 1's training: its time follows the pairs it trains on
EVERY_INPUT = "every component runs on every input (no `when` skips) and every sampled candidate output is distinct"
FIRST_ACCEPTED = "the first proposal for each component is accepted by the validation gate, every later one rejected"
ALL_PAIRED = "every optimizable component gets preference pairs (skip_unpaired never picks one without)"


class PhaseCount:
    """Expected executions per component, LM calls per attribution name and other work, for one phase."""

    def __init__(self) -> None:
        self.executions: dict[str, float] = defaultdict(float)
        self.calls: dict[str, float] = defaultdict(float)
        self.cached: dict[str, float] = defaultdict(float)  # the calls among them the LM-call cache serves
        self.work: dict[str, float] = defaultdict(float)

    def run(self, comp: Component, n: float, values_per_input: float = 1.0, cached: bool = False) -> None:
        """n inputs through `comp`; a routing policy runs (and the ledger counts) every value on each.
        `cached`: the same requests were made before in this run (counted, served by the call cache)."""
        self.executions[comp.name] += n * values_per_input
        if comp.calls_lm:
            self.calls[comp.name] += n * values_per_input
            if cached:
                self.cached[comp.name] += n * values_per_input

    def add(self, other: PhaseCount, weight: float = 1.0) -> None:
        for mine, theirs in ((self.executions, other.executions), (self.calls, other.calls),
                             (self.cached, other.cached), (self.work, other.work)):
            for k, v in theirs.items():
                mine[k] += weight * v


@dataclass(frozen=True)
class Conditions:
    """What an estimate depends on besides the method, the pipeline and the splits: the run's LM temperature and
    the share of candidate pairs expected to differ in reward (the rest tie downstream: an earlier run's share)."""

    lm_temperature: float = 0.0
    pair_share: float = 1.0


@dataclass
class Estimate:
    """A method's expected work: per phase counts, the facts a plan shows (accepted updates, pairs, bounds) and
    what it assumed to count them. `validated_final`: the final validation re-scores a configuration the
    method already ran on validation (its LM calls are cache hits)."""

    phases: dict[str, PhaseCount] = field(default_factory=lambda: {p: PhaseCount() for p in PHASES})
    facts: dict = field(default_factory=dict)
    assumptions: list[str] = field(default_factory=lambda: [EVERY_INPUT])
    validated_final: bool = True

    def assume(self, *lines: str) -> None:
        self.assumptions += [line for line in lines if line not in self.assumptions]


def scaled(add: Callable[[PhaseCount], object], weight: float, into: PhaseCount) -> None:
    """Add what `add(phase)` counts, weighted by the probability (or the number of times) that it happens."""
    if weight <= 0:
        return
    part = PhaseCount()
    add(part)
    into.add(part, weight)


def full_runs(system: CompoundSystem, n: float, phase: PhaseCount, config=None, cached: bool = False) -> None:
    """n inputs through the whole system (`cached`: requests this run made before)."""
    config = config if config is not None else system.default_config()
    for name in system.order:
        phase.run(system.components[name], n, system.components[name].values_per_input(config[name]), cached)


def rerun_counts(system: CompoundSystem, names: str | Sequence[str], n: float, config, phase: PhaseCount) -> None:
    """run_from(name), or run_changed(names): the components and everything downstream of them, on n inputs."""
    changed = {c for name in ([names] if isinstance(names, str) else names) for c in (name, *system.downstream(name))}
    for other in (c for c in system.order if c in changed):
        phase.run(system.components[other], n, system.components[other].values_per_input(config[other]))


def first_picks(iterations: int, m: int, scheduler: str) -> float:
    """Expected number of iterations, among the first `iterations`, that pick a given component for
    the first time, divided by the chance 1/m of picking it: the sum over t of the chance that
    iteration t is a first pick. Round robin picks each of the m once in the first m iterations;
    uniform (prioritized is planned as uniform) first picks at t with (1 - 1/m)^t, a geometric series."""
    if m == 0 or iterations <= 0:
        return 0.0
    if scheduler == "round_robin":
        return float(min(iterations, m))
    return m * (1 - (1 - 1 / m) ** iterations)


def local_search(comp: Component, search: int, prompt: Mapping, weights: Mapping, phase: PhaseCount) -> None:
    """One local optimization of `comp` on the search sample (optim/choice.py, prompt.py, weights.py)."""
    if comp.kind is ConfigKind.CHOICE and not comp.per_instance:
        phase.run(comp, len(comp.choices) * search)  # every value scored by r_k
    elif comp.kind is ConfigKind.PROMPT:
        steps, cands = int(prompt["num_steps"]), int(prompt["num_candidates"])
        phase.run(comp, (1 + steps * cands) * search)  # the current prompt, then each proposal (at most)
        phase.calls[f"{comp.name}.optimizer"] += steps * cands
    elif comp.kind is ConfigKind.WEIGHTS:
        phase.run(comp, 2 * search)  # the current adapter and the trained one
        phase.work[WEIGHTS_SAMPLE] += (int(weights.get("steps", 2)) * int(weights.get("prompts_per_step", 1))
                                       * int(weights.get("num_generations", 2)))


def stage1(system: CompoundSystem, n_train: int, lrf: Mapping, lm_temperature: float, phases: dict[str, PhaseCount],
           pair_share: float, train: bool = True, max_runs: float | None = None) -> dict:
    """Stage 1 (lrf/stage.py): preference collection on the training split, sized to its share of `max_runs` (the
    run cap, lrf/sizing.py) where there is one, then (`train`) the LRF's training steps and, where a component has
    a test split, the LLM judge on its test pairs.
    `pair_share`: the share of candidate pairs expected to differ in reward (the rest tie downstream)."""
    config, collect = system.default_config(), dict(lrf.get("collect") or {})
    facts: dict = {}
    names = None
    limit = stage1_limit(collect, max_runs)
    if limit is not None:
        size = size_collection(system, config, optimizable_components(system), n_train, collect, lm_temperature, limit)
        collect, n_train, names = size.settings(collect), size.inputs, list(size.components)
        facts["stage1_size"] = size.to_dict()
    pairs = pair_share * expected_collection(system, config, n_train, collect, phases["lrf_collection"],
                                             lm_temperature, names)
    facts["pairs"] = pairs
    if not train:
        return facts
    settings = lrf.get("train") or {}
    # Pairs split by input into train / dev / test; a test split only where there are enough pairs
    # (lrf/stage.py: per component; the plan applies the threshold to the total, an estimate).
    enough = pairs >= int(lrf.get("min_test_pairs", 0) or 0)
    test_share = float(settings.get("test_fraction", 0.2)) if enough else 0.0
    dev_share = float(settings.get("dev_fraction", 0.2))
    if (lrf.get("judge") or {}).get("enabled", True):
        phases["lrf_judge"].calls[JUDGE_COMPONENT] += round(pairs * test_share)
    batches = max(1, math.ceil(pairs * max(0.0, 1 - test_share - dev_share) / int(settings.get("batch_size", 16))))
    steps = max(int(settings.get("epochs", 10)) * batches, int(lrf.get("min_steps", 0) or 0))
    phases["lrf_training"].work[LRF_PAIRS] += pairs
    return {**facts, "lrf_steps": steps}


@dataclass
class LoopShape:
    """What Algorithm 1 (optim/loop.py) does, as a method configures it: the components it may pick, how it
    scores a candidate output (`downstream_rollouts`: runs of the rest of the system per scored output, the
    global-reward ablation's scorer; 0: a model or a free scorer), and its optimizer settings."""

    picks: list[str]
    scheduler: str
    prompt: Mapping
    weights: Mapping
    downstream_rollouts: int = 0
    race: RaceSettings = field(default_factory=RaceSettings)

    def validation_examples(self, comp: Component, n_val: int) -> int:
        """Validation examples an iteration on `comp` runs: one pass, or a race of its shortlist (optim/race.py)
        among the candidates its local optimizer ranks (a global choice's values, a prompt search's proposals and
        the current instruction)."""
        if not self.race.on or comp.per_instance or comp.kind not in (ConfigKind.CHOICE, ConfigKind.PROMPT):
            return n_val
        ranked = (len(comp.choices) if comp.kind is ConfigKind.CHOICE
                  else 1 + int(self.prompt["num_steps"]) * int(self.prompt["num_candidates"]))
        contenders = min(self.race.shortlist, ranked)
        return example_runs(contenders, n_val, self.race) if contenders >= 2 else n_val


def loop_shape(picks: list[str], scheduler: str, budget, optimizer: Mapping, downstream_rollouts: int = 0) -> LoopShape:
    """The loop as a method's settings make it: budget.num_steps and num_candidates unless method.optimizer.prompt
    sets them; method.optimizer.weights sizes GRPO; method.optimizer.race the race of a shortlist."""
    prompt = {"num_steps": budget.num_steps, "num_candidates": budget.num_candidates, **dict(optimizer.get("prompt") or {})}
    race = typed(RaceSettings, optimizer.get("race"), "optimizer.race")
    return LoopShape(picks, scheduler, prompt, dict(optimizer.get("weights") or {}), downstream_rollouts, race)


def search_size(budget, splits: Splits) -> int:
    """The loop's search sample: budget.search_size training inputs, at most the split."""
    return min(int(budget.search_size), len(splits.train))


def loop(system: CompoundSystem, splits: Splits, search: int, iterations: int, shape: LoopShape,
         phases: dict[str, PhaseCount], refresh: Callable[[str, float, dict], None] | None = None,
         collected: bool = False) -> float:
    """The loop's opening validation and search-sample runs, then `iterations` iterations, each picking one of
    `shape.picks` with probability 1/m; returns the expected accepted updates (`FIRST_ACCEPTED`).
    `refresh(name, weight, phases)`: what an acceptance of `name` adds besides the loop's own re-runs (Stage 2).
    `collected`: Stage 1 ran the initial configuration on the training inputs, so the search sample's first run
    is served by the call cache."""
    config, n_val = system.default_config(), len(splits.val)
    val, sample, opt = phases["validation"], phases[SEARCH_SAMPLE_PHASE], phases["local_optimization"]
    full_runs(system, n_val, val)
    full_runs(system, search, sample, cached=collected)
    m = len(shape.picks)
    # Every iteration adds the same expected work, except what follows an acceptance, which happens
    # at a first pick: T iterations add T times the one, `first` (the summed first-pick chances) the other.
    first = first_picks(iterations, m, shape.scheduler)
    for name in shape.picks:
        comp, share = system.components[name], 1 / m
        scaled(lambda p, c=comp: local_search(c, search, shape.prompt, shape.weights, p), share * iterations, opt)
        if shape.downstream_rollouts and system.downstream(name):  # each scored output runs the rest of the system
            executed = PhaseCount()
            local_search(comp, search, shape.prompt, shape.weights, executed)
            outputs = executed.executions[name]
            scaled(lambda p, n=name, o=outputs: rerun_counts(system, system.downstream(n), o * shape.downstream_rollouts,
                                                             config, p), share * iterations, opt)
        routed = comp.kind is ConfigKind.CHOICE and comp.per_instance
        validated = first if routed else iterations  # a route equal to the current one is not validated again
        examples = shape.validation_examples(comp, n_val)
        scaled(lambda p, n=name, e=examples: rerun_counts(system, n, e, config, p), share * validated, val)
        # an acceptance: the search sample follows the new configuration
        scaled(lambda p, n=name: rerun_counts(system, n, search, config, p), share * first, sample)
        if refresh is not None:
            refresh(name, share * first, phases)
    return first if m else 0.0


def lazy_refreshes(system: CompoundSystem, optimizable: list[str], iterations: int, scheduler: str) -> dict[str, float]:
    """Per component, the most times method.adaptation=lazy can refresh its r_k (optim/loop.py), whatever the gate
    accepts: when it is picked, at most once per iteration, never in the first (no update is accepted yet) and never
    for a component with no other optimizable one upstream or downstream of it (no update can make its pairs stale:
    lrf/stage.DrawnVersions). Its expected picks after the first iteration; round robin's are counted exactly
    (optim/scheduler.py picks component t mod m in iteration t), prioritized is planned as uniform."""
    from optimas_cli.lrf.stage import DrawnVersions  # torch: only where an LRF adapts

    context, m = DrawnVersions(system).context, len(optimizable)
    refreshes = {}
    for index, name in enumerate(optimizable):
        if iterations > 1 and context[name] & set(optimizable):
            refreshes[name] = (float(len(range(index, iterations, m)) - (index == 0)) if scheduler == "round_robin"
                               else (iterations - 1) / m)
    return refreshes


def lazy_adaptation(pipeline: Pipeline, optimizable: list[str], iterations: int, scheduler: str, fresh: int,
                    collect: Mapping, lm_temperature: float, heads_only: bool, n_val: int, search: int,
                    phases: dict[str, PhaseCount]) -> tuple[float, str | None]:
    """method.adaptation=lazy at its most: (refreshes, the line that says it is an upper bound)."""
    system, config = pipeline.system, pipeline.system.default_config()
    refreshes = lazy_refreshes(system, optimizable, iterations, scheduler)
    if not refreshes:
        return 0.0, None
    # A refresh moves the LRF routes it rescores (Stage2.scores_changed_by: on a frozen backbone only its own),
    # which are re-validated and re-run on the search sample: at most every per-instance choice's.
    routers = [n for n in optimizable if system.components[n].kind is ConfigKind.CHOICE and system.components[n].per_instance]
    rerouted = False
    for name, times in refreshes.items():
        scaled(lambda p, n=name: expected_collection(system, config, fresh, collect, p, lm_temperature, [n]),
               times, phases["adaptation"])
        if routed := [r for r in routers if r == name or not heads_only]:
            rerouted = True
            scaled(lambda p, r=routed: rerun_counts(system, r, n_val, config, p), times, phases["validation"])
            scaled(lambda p, r=routed: rerun_counts(system, r, search, config, p), times, phases[SEARCH_SAMPLE_PHASE])
    total = sum(refreshes.values())
    return total, (f"adaptation is an upper bound (method.adaptation=lazy): at most {total:.2f} refreshes, one per "
                   f"iteration after the first, each of the picked component's r_k on {fresh} fresh inputs "
                   "(budget.fresh_size)" + (", then the LRF routes it moves re-validated" if rerouted else "")
                   + "; how many happen depends on what the gate accepts")
