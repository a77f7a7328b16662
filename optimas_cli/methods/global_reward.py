"""Global-reward-only ablation: Algorithm 1 with the LRFs replaced by the global metric itself.

Every candidate output a local optimizer proposes is scored by substituting it into the cached
search trajectories and running the rest of the system (scorers.GlobalRewardScorer). No
preference pairs, no LRF training, no Stage 2. Its cost — a downstream run per scored batch —
lands in the ledger under "local_optimization".

`ScoredLoopBaseline` is the part this shares with HBC: the same loop, local optimizers, validation
gate, budget sizes and outputs as Optimas, around a scorer built by `make_scorer`.

Per-instance choices are optimized as global choices here (one value for every input). Routing per
input needs a reward model that can score unseen inputs at inference, and the global reward needs
the example's gold answer, so neither baseline can put a routing policy into its configuration.

The loop refuses a step whose known cost does not fit a cap; the local search's cost is not known in
advance, so the loop runs inside system/caps.stops_mid_phase: a search that crosses a cap stops within
one batch, and the run returns the loop's last checkpoint (its configuration was validated within the cap).
"""
from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping

from rich.console import Console

from optimas_cli.methods.base import EVERY_KIND, Method, MethodOutcome
from optimas_cli.methods.cost import FIRST_ACCEPTED, Conditions, Estimate, loop, loop_shape, search_size
from optimas_cli.methods.scorers import GlobalRewardScorer, RandomScorer
from optimas_cli.optim.loop import LoopSettings, OptimasLoop
from optimas_cli.optim.prompt import loop_proposer
from optimas_cli.system import CompoundSystem, ConfigKind, Pipeline
from optimas_cli.system.budget import Budget


def with_global_choices(pipeline: Pipeline) -> Pipeline:
    """The same pipeline, with every per-instance choice component offered as a global choice.

    Components are shallow copies (same forward, same resources); the original pipeline is untouched,
    and a configuration found on the copy runs unchanged on the original.
    """
    components, changed = [], False
    for comp in pipeline.system.components.values():
        if comp.kind is ConfigKind.CHOICE and comp.per_instance:
            comp = copy.copy(comp)
            comp.per_instance = False
            changed = True
        components.append(comp)
    if not changed:
        return pipeline
    system = CompoundSystem(components, pipeline.system.inputs, pipeline.system.outputs)
    return dataclasses.replace(pipeline, system=system)



class ScoredLoopBaseline(Method):
    """Algorithm 1 without Stage 1/2: the loop runs on whatever `make_scorer` returns."""

    label = "scored loop"
    optimizes = EVERY_KIND
    downstream_rollouts = 0  # runs of the rest of the system per scored output (the global reward's scorer)

    def __init__(self, name: str, budget: Budget, console: Console | None = None, scheduler: str = "uniform",
                 optimizer: Mapping | None = None, seed: int = 0, gate: str = "strict", gate_alpha: float = 0.1,
                 optimizer_lm: str | None = None):
        super().__init__(name, budget, console)
        self.scheduler, self.optimizer, self.seed = scheduler, dict(optimizer or {}), seed
        self.gate, self.gate_alpha = gate, gate_alpha
        self.optimizer_lm = optimizer_lm  # the prompt proposer's model (None: the run's LM)

    def make_scorer(self, pipeline: Pipeline, splits, ctx, folder) -> tuple[object, dict]:
        raise NotImplementedError

    def prompt_proposer(self, pipeline, ctx):
        return loop_proposer(pipeline, self.optimizer, self.optimizer_lm, ctx)

    def estimate(self, pipeline, splits, conditions: Conditions) -> Estimate:
        """Algorithm 1 on the scorer, per-instance choices as global ones; no Stage 1 or 2."""
        view, est = with_global_choices(pipeline), Estimate()
        est.assume(FIRST_ACCEPTED)
        shape = loop_shape(self.targets(view), self.scheduler, self.budget, self.optimizer, self.downstream_rollouts)
        est.facts["accepted_updates"] = loop(view.system, splits, search_size(self.budget, splits),
                                             self.budget.iterations, shape, est.phases)
        return est

    def optimize(self, pipeline, splits, ctx, folder) -> MethodOutcome:
        view = with_global_choices(pipeline)
        names = self.fit(view)
        scorer, extras = self.make_scorer(view, splits, ctx, folder)
        settings = LoopSettings.from_budget(self.budget, self.scheduler, self.optimizer, self.seed,
                                            str(folder.file("adapters")), self.gate, self.gate_alpha, self.optimizer_lm)
        loop = OptimasLoop(view, splits.train, splits.val, ctx, scorer, settings, folder, adapt=None,
                           on_iteration=self.print_iteration, schedulable=lambda: names)
        self.console.print(f"[bold]Algorithm 1 ({self.label})[/] · {settings.length(ctx.caps)}, "
                           f"scheduler {self.scheduler}")
        config, history = loop.run_within_caps()
        return MethodOutcome(config=config, lrf=None, history=history, extras={self.name: extras})


class GlobalReward(ScoredLoopBaseline):
    """`rollouts`: downstream samples averaged per scored output (1: one run of the rest of the system)."""

    label = "global reward only"

    def __init__(self, budget: Budget, name: str = "global_reward", console: Console | None = None,
                 scheduler: str = "uniform", optimizer: Mapping | None = None, seed: int = 0, rollouts: int = 1,
                 gate: str = "strict", gate_alpha: float = 0.1, optimizer_lm: str | None = None):
        super().__init__(name, budget, console, scheduler, optimizer, seed, gate, gate_alpha, optimizer_lm)
        self.rollouts = self.downstream_rollouts = int(rollouts)

    def make_scorer(self, pipeline, splits, ctx, folder):
        self._scorer = GlobalRewardScorer(pipeline, ctx.replace(phase="local_optimization"), self.rollouts)
        return self._scorer, {"scorer": "global metric after a downstream run", "rollouts": self.rollouts}

    def optimize(self, pipeline, splits, ctx, folder) -> MethodOutcome:
        outcome = super().optimize(pipeline, splits, ctx, folder)
        outcome.extras[self.name]["scored_batches"] = self._scorer.calls
        return outcome


class RandomReward(ScoredLoopBaseline):
    """The 'random reward' ablation: the same loop and gate, with every candidate output scored by a seeded
    random number (scorers.RandomScorer). Free to score, so at matched cost it affords many more iterations
    than Optimas, whose LRF costs Stage 1's collection; Optimas must beat it to show its LRF chose well."""

    label = "random reward"

    def __init__(self, budget: Budget, name: str = "random_reward", console: Console | None = None,
                 scheduler: str = "uniform", optimizer: Mapping | None = None, seed: int = 0, gate: str = "strict",
                 gate_alpha: float = 0.1, optimizer_lm: str | None = None):
        super().__init__(name, budget, console, scheduler, optimizer, seed, gate, gate_alpha, optimizer_lm)

    def make_scorer(self, pipeline, splits, ctx, folder):
        return RandomScorer(self.seed), {"scorer": "a seeded random number per (input, output)"}
