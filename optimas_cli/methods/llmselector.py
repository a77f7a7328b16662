"""LLMSelector (Chen et al., 2025): allocate one model to each model-choice component.

Greedy coordinate ascent, as in the paper's allocation search: in each round, for each model-choice
component in turn, try every candidate model with the other components' models fixed, estimate
the system's performance (mean global reward) on a training sample, and keep the best model —
switching only on a strictly higher estimate. Rounds repeat until an allocation survives a whole
round unchanged, or `rounds` (default: the budget's iterations) is spent; a matched-cost run
(budget.max_runs_from) without an explicit `rounds` has no round limit, only the reference's run cap.

Each estimate is a real run of the system on the sample, counted in the ledger under
"local_optimization". Components upstream of the one being varied are not re-executed: their
outputs are identical under the fixed allocation (same configuration, same LM samples), so they
are reused from the cached trajectories and only the varied component and its downstream run —
the same accounting as Optimas's validation gate. Allocations already measured are not re-run.

The paper's LLM diagnoser (which estimates per-module quality to prune the search) is not used:
every candidate is measured end to end, the more expensive and more exact variant.

Model-choice components are CHOICE components whose single output names a model (the field is
`model` or ends in `_model`, as PubMedQA's two selectors); `components` names them explicitly.
"""
from __future__ import annotations

import itertools
import statistics

from optimas_cli.errors import UserError
from optimas_cli.methods.base import Method, MethodOutcome
from optimas_cli.methods.cost import Conditions, Estimate, full_runs, rerun_counts, scaled
from optimas_cli.methods.scorers import input_key
from optimas_cli.optim.history import HistoryEntry
from optimas_cli.progress import track
from optimas_cli.system import ConfigKind, Pipeline, SystemConfig
from optimas_cli.system.budget import Budget
from optimas_cli.system.caps import cap_reached, end_as_planned, ends_at_run_cap, iterations_in_words
from optimas_cli.system.evaluate import rewards

APPLIES_TO = "pubmedqa (context_model_selector, solver_model_selector) and toy_model_selector"


def is_model_choice(component) -> bool:
    outs = component.outputs
    return (component.kind is ConfigKind.CHOICE and len(outs) == 1
            and (outs[0] == "model" or outs[0].endswith("_model")))


def model_components(pipeline: Pipeline, names=None) -> list[str]:
    system = pipeline.system
    if names:
        unknown = [n for n in names if n not in system.components]
        wrong = [n for n in names if n in system.components and system.components[n].kind is not ConfigKind.CHOICE]
        if unknown or wrong:
            raise UserError(
                f"llmselector: {unknown + wrong} {'are not components' if unknown else 'are not choice components'} "
                f"of pipeline {pipeline.name!r}",
                f"name choice components of {list(system.components)} in method.components",
            )
        return [n for n in system.order if n in names]
    return [n for n in system.order if is_model_choice(system.components[n])]


class LLMSelector(Method):
    optimizes = frozenset({ConfigKind.CHOICE})
    targets_are = f"model-choice (a choice whose one output names a model: {APPLIES_TO}; or method.components')"

    def __init__(self, budget: Budget, name: str = "llmselector", console=None, components=None,
                 rounds: int | None = None, sample_size: int | None = None):
        super().__init__(name, budget, console)
        self.components = list(components) if components else None
        self.rounds = int(rounds if rounds is not None else budget.iterations)
        # matched cost: the run cap, not budget.iterations, ends the search (an explicit `rounds` still bounds it)
        self.until_cap = rounds is None and bool(budget.max_runs_from)
        self.sample_size = int(sample_size if sample_size is not None else budget.search_size)

    def targets(self, pipeline: Pipeline) -> list[str]:
        return model_components(pipeline, self.components)

    def estimate(self, pipeline, splits, conditions: Conditions) -> Estimate:
        """The allocation's sample run, then every round of the greedy search trying each other model of each
        component (an upper bound: a round that changes nothing ends it, and no allocation is measured twice)."""
        system, est = pipeline.system, Estimate()
        est.assume(f"llmselector runs all {self.rounds} rounds of its greedy search, each model of each component "
                   "measured once per round (an upper bound: a round that changes nothing ends the search)")
        sample, config, phase = min(self.sample_size, len(splits.train)), system.default_config(), \
            est.phases["local_optimization"]
        full_runs(system, sample, phase)
        for name in self.targets(pipeline):
            others = len(system.components[name].candidate_values()) - 1
            scaled(lambda p, n=name: rerun_counts(system, n, sample, config, p), self.rounds * others, phase)
        est.validated_final = False  # it estimates on a training sample, never on validation
        return est

    def optimize(self, pipeline, splits, ctx, folder) -> MethodOutcome:
        system = pipeline.system
        names = self.fit(pipeline)
        sample = list(splits.train[: self.sample_size])
        octx = ctx.replace(phase="local_optimization")
        measured: dict[str, float] = {}

        def estimate(trajs) -> float:
            return statistics.fmean(rewards(pipeline, trajs)) if trajs else 0.0

        config = system.default_config()
        if cap_reached(ctx, {"max_runs": system.rerun_cost(None, len(sample), config)}):  # not started
            end_as_planned(self.until_cap, ctx.caps, "llmselector")
            return MethodOutcome(config=config, extras={"llmselector": {
                "components": names, "allocation": {n: config[n] for n in names}, "train_estimate": None,
                "sample_size": len(sample), "rounds_run": 0, "allocations_measured": 0}})
        with ctx.ledger.timed("local_optimization"):
            trajs = system.run(sample, config, octx)
        score = measured[input_key(config.to_dict())] = estimate(trajs)
        rounds_words = iterations_in_words(self.until_cap, self.rounds, ctx.caps).replace("iterations", "rounds")
        self.console.print(f"[bold]llmselector[/] · {names} · {len(sample)} training examples · {rounds_words}"
                           f" · start {score:.3f}")
        history: list[HistoryEntry] = []
        rounds_run = 0
        # Unbounded rounds still end: allocations are finite, none is measured twice, and a round that
        # changes nothing stops the search.
        rounds = itertools.count(1) if ends_at_run_cap(self.until_cap, ctx.caps) else range(1, self.rounds + 1)
        stopped = False  # a candidate's estimate would cross a cap: the search ends with what it measured
        for rnd in track(rounds, "llmselector rounds", lm=ctx.lm):
            if stopped or cap_reached(ctx):  # a safe point: the allocation so far is saved
                break
            rounds_run = rnd
            changed = False
            for name in names:
                best = (config[name], score, trajs)
                for model in system.components[name].candidate_values():
                    if model == config[name]:
                        continue
                    candidate = config.replace(name, model)
                    key = input_key(candidate.to_dict())
                    if key in measured:  # seen in an earlier round: accepted estimates only rise, so it cannot win
                        continue
                    if cap_reached(ctx, {"max_runs": system.rerun_cost(name, len(sample), candidate)}):
                        stopped = True
                        break
                    with ctx.ledger.timed("local_optimization"):
                        cand_trajs = system.run_from(name, trajs, candidate, octx)
                    cand_score = measured[key] = estimate(cand_trajs)
                    better = cand_score > best[1]
                    # Its gate is an estimate on a training sample, recorded as that sample's total.
                    n = len(sample)
                    history.append(HistoryEntry(
                        iteration=len(history) + 1, component=name, kind="choice", proposal=model,
                        val_before=best[1] * n, val_candidate=cand_score * n, val_after=max(best[1], cand_score) * n,
                        accepted=better, runs_so_far=round(ctx.ledger.equivalent_runs(), 2), n=n,
                        scored_on="training sample", details={"round": rnd, "current": config[name]},
                    ))
                    self.console.print(f"  round {rnd} · {name:<24} · {model:<32} · {cand_score:.3f}"
                                  f"{'  [green]best so far[/]' if better else ''}")
                    if better:
                        best = (model, cand_score, cand_trajs)
                if best[0] != config[name]:
                    config, score, trajs = config.replace(name, best[0]), best[1], best[2]
                    changed = True
                if stopped:
                    break
            config.save(folder.file("best_config.json"))
            if not changed:
                break
        end_as_planned(self.until_cap, ctx.caps, "llmselector")
        allocation = {n: config[n] for n in names}
        return MethodOutcome(
            config=SystemConfig(config),
            history=history,
            extras={"llmselector": {
                "components": names, "allocation": allocation, "train_estimate": score,
                "sample_size": len(sample), "rounds_run": rounds_run, "allocations_measured": len(measured),
            }},
        )
