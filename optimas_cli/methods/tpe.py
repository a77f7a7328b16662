"""TPE: Optuna's Tree-structured Parzen Estimator over coordinate ascent's candidate space, every trial
scored by the summed global reward on validation minibatches and pruned by successive halving.

The space: each prompt and choice component is one categorical parameter over its initial value and
coordinate ascent's candidates for it (a choice's other values; a prompt's pipeline instructions and
structured edits, prompt_pool.fixed_drafts, so no LM writes them). Per-instance choices are searched as
global choices and weights components are left unchanged, as coordinate ascent does.

Trial 0 is the initial configuration. A trial runs on the validation split in minibatches of
`minibatch_size` (one seeded order for every trial), re-running only the components that differ from the
best configuration so far, on that configuration's cached validation trajectories. After each minibatch
but the last it reports the running mean reward, and optuna's SuccessiveHalvingPruner may stop it. A trial
not pruned was scored on the whole validation split, and replaces the best configuration only if its
summed validation reward is strictly higher (the gate of coordinate ascent and global_reward), so the
result is the best configuration validated in full within the cap. A configuration TPE proposes again is
told its earlier result without running. Cost: each minibatch is checked against the caps before it runs,
so budget.max_runs is never crossed; a trial's validation runs are charged by the paper's accounting
only when it is accepted (executed runs count them all).

The search ends after `trials` scored trials (null: budget.iterations; in a matched-cost run, budget.
max_runs_from, until the run cap), once every configuration of the space is scored, when TPE proposes
only scored ones (MAX_REPEATS in a row), or at a cap. Every scored trial is checkpointed (tpe_state.json:
the study's trials, the pickled sampler, the best configuration, history; the run's accounts), so a killed
or capped run resumes with the study rebuilt and the sampler where it was, and goes on as an
uninterrupted run would.
"""
from __future__ import annotations

import base64
import math
import pickle
import statistics
from contextlib import nullcontext

import numpy as np
import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import FrozenTrial, TrialState
from rich.console import Console

from optimas_cli.errors import UserError
from optimas_cli.methods.base import Method, MethodOutcome
from optimas_cli.methods.coordinate_ascent import CoordinateAscent
from optimas_cli.methods.cost import Conditions, Estimate, full_runs, rerun_counts, scaled
from optimas_cli.methods.global_reward import with_global_choices
from optimas_cli.optim.history import HistoryEntry
from optimas_cli.system import ConfigKind, SystemConfig
from optimas_cli.system.budget import Budget
from optimas_cli.system.caps import cap_reached, end_as_planned
from optimas_cli.system.evaluate import rewards
from optimas_cli.system.run_folder import uncounted

STATE_FILE = "tpe_state.json"  # the checkpoint a killed or capped run resumes from
MAX_REPEATS = 100  # proposals of already scored configurations in a row after which TPE has nothing new to try


class TPE(Method):
    def __init__(self, budget: Budget, name: str = "tpe", console: Console | None = None, seed: int = 0,
                 trials: int | None = None, minibatch_size: int = 5, reduction_factor: int = 3,
                 startup_trials: int = 10):
        super().__init__(name, budget, console)
        for key, value, least in (("minibatch_size", minibatch_size, 1), ("reduction_factor", reduction_factor, 2),
                                  ("startup_trials", startup_trials, 0), ("trials", trials or 0, 0)):
            if int(value) < least:
                raise UserError(f"method.{key}={value} must be at least {least}", f"e.g. method.{key}={max(least, 3)}")
        self.seed, self.minibatch_size = int(seed), int(minibatch_size)
        self.reduction_factor, self.startup_trials = int(reduction_factor), int(startup_trials)
        self.trials = int(trials if trials is not None else budget.iterations)
        # matched cost: the run cap, not budget.iterations, ends the search (an explicit `trials` still bounds it)
        self.until_cap = trials is None and bool(budget.max_runs_from)

    prompt_proposer = CoordinateAscent.prompt_proposer  # the same pool of instructions, no LM
    optimizes = CoordinateAscent.optimizes

    def estimate(self, pipeline, splits, conditions: Conditions) -> Estimate:
        """Trial 0 (the initial configuration) on the whole validation split, then `trials` trials, each re-running
        the searched components and what follows them on every validation minibatch (an upper bound: successive
        halving prunes a trial after its first minibatches, and a trial changes only the components it draws anew)."""
        view, est = with_global_choices(pipeline), Estimate()
        system, n_val, config = view.system, len(splits.val), view.system.default_config()
        names = self.targets(view)
        space = math.prod(1 + len(CoordinateAscent.candidates(system.components[n], config[n])) for n in names)
        trials = min(self.trials, space - 1)
        est.assume(f"each of tpe's {trials} trials is scored on the whole validation split, none pruned (an upper bound)")
        full_runs(system, n_val, est.phases["validation"])
        scaled(lambda p: rerun_counts(system, names, n_val, config, p), trials, est.phases["validation"])
        return est

    def optimize(self, pipeline, splits, ctx, folder) -> MethodOutcome:
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # the console prints each trial once, below
        view = with_global_choices(pipeline)
        system, val, vctx = view.system, list(splits.val), ctx.replace(phase="validation")
        names = self.fit(view)
        initial = system.default_config()
        space = {n: [initial[n], *CoordinateAscent.candidates(system.components[n], initial[n])] for n in names}
        distributions = {n: CategoricalDistribution(list(range(len(values)))) for n, values in space.items()}
        order = np.random.default_rng(self.seed).permutation(len(val)).tolist()
        batches = [order[i:i + self.minibatch_size] for i in range(0, len(val), self.minibatch_size)]
        pruner = optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=self.reduction_factor)

        state = folder.read_json(STATE_FILE)
        if state:  # a killed or capped run: the study as it was at its last scored trial
            sampler = pickle.loads(base64.b64decode(state["sampler"]))
            study = optuna.create_study(direction="maximize", sampler=sampler, pruner=pruner)
            for record in state["trials"]:
                study.add_trial(_rebuilt(record, distributions))
            config, best_total = SystemConfig(state["config"]), float(state["best_total"])
            history = [HistoryEntry.from_dict(e) for e in state["history"]]
            # The best configuration's validation trajectories feed every later trial; the checkpoint's
            # accounts hold them, so they are rebuilt uncounted.
            with uncounted(ctx), ctx.ledger.timed("validation"):
                trajs = system.run(val, config, vctx)
        else:
            sampler = optuna.samplers.TPESampler(seed=self.seed, n_startup_trials=self.startup_trials)
            study = optuna.create_study(direction="maximize", sampler=sampler, pruner=pruner)
            study.enqueue_trial({n: 0 for n in names})  # trial 0: the initial configuration
            config, best_total, trajs, history = initial, 0.0, None, []
        seen = {_key(t.params, names): t for t in study.trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)}
        size = math.prod(len(v) for v in space.values())
        extras = {"searched": names, "left_unchanged": {n: c.kind.value for n, c in system.components.items()
                                                        if c.kind is ConfigKind.WEIGHTS},
                  "space_size": float(size), "minibatch_size": self.minibatch_size, "minibatches": len(batches),
                  "reduction_factor": self.reduction_factor, "sampler": f"TPESampler(seed={self.seed})",
                  "optuna": optuna.__version__, "ended": "", "resumed_after_trial": len(state["trials"]) - 1 if state else None}
        self.console.print(f"[bold]TPE[/] · {len(names)} components · {size:.3g} configurations · "
                           f"{len(batches)} validation minibatches of {self.minibatch_size}"
                           + (f" · resumed after trial {extras['resumed_after_trial']}, validation {best_total:.3f}" if state else ""))

        repeats = 0
        while True:
            if trajs is not None and not self.until_cap and len(history) >= self.trials:
                extras["ended"] = f"{self.trials} trials scored"
                break
            if len(seen) == size:
                extras["ended"] = "every configuration scored"
                break
            if repeats >= MAX_REPEATS:
                extras["ended"] = f"TPE proposed only scored configurations {MAX_REPEATS} times in a row"
                break
            trial = study.ask(distributions)
            key = _key(trial.params, names)
            if key in seen:  # told its earlier result: TPE learns nothing new, and nothing runs
                _replay(study, trial, seen[key])
                repeats += 1
                continue
            repeats = 0
            candidate = SystemConfig({**config, **{n: space[n][i] for n, i in zip(names, key, strict=True)}})
            changed = [n for n in names if candidate[n] != config[n]]
            scores: dict[int, float] = {}
            cand_trajs: dict[int, object] = {}
            means: list[float] = []
            outcome = "complete"
            first = trajs is None  # trial 0: nothing cached yet, the whole system runs and is charged
            with ctx.ledger.timed("validation"), (nullcontext() if first else ctx.ledger.provisional()) as validation:
                for step, batch in enumerate(batches, 1):
                    if cap_reached(ctx, {"max_runs": system.rerun_cost(None if first else changed, len(batch), candidate)}):
                        outcome = "capped"
                        break
                    if first:
                        ran = system.run([val[i] for i in batch], candidate, vctx)
                    else:
                        ran = system.run_changed(changed, [trajs[i] for i in batch], candidate, vctx)
                    for i, t, score in zip(batch, ran, rewards(view, ran), strict=True):
                        scores[i], cand_trajs[i] = score, t
                    means.append(statistics.fmean(scores.values()))
                    trial.report(means[-1], step)
                    if step < len(batches) and not first and trial.should_prune():
                        outcome = "pruned"
                        break
                total = sum(scores.values())
                accepted = outcome == "complete" and not first and total > best_total
                if accepted:
                    validation.keep()  # charged as the paper charges an accepted validation pass
            if outcome == "capped":
                extras["ended"] = str(ctx.caps.stopped) if ctx.caps is not None and ctx.caps.stopped else "a cap"
                break
            if outcome == "pruned":
                study.tell(trial, state=TrialState.PRUNED)
            else:
                study.tell(trial, means[-1])
            seen[key] = study.get_trials(deepcopy=False)[trial.number]
            if first:
                best_total, trajs = total, [cand_trajs[i] for i in range(len(val))]
                self.console.print(f"  trial 0 · the initial configuration · validation {best_total:.3f}")
            else:
                entry = HistoryEntry(
                    iteration=len(history) + 1, component=changed, kind=_kind(system, changed),
                    proposal={n: candidate[n] for n in changed}, val_before=best_total,
                    val_candidate=total if outcome == "complete" else None,
                    val_after=total if accepted else best_total, accepted=accepted, runs_so_far=0.0, n=len(val),
                    note=(f"pruned by successive halving after {len(scores)} of {len(val)} validation examples"
                          if outcome == "pruned" else ""),
                    details={"trial": trial.number, "minibatch_means": means, "examples_scored": len(scores)})
                if accepted:
                    config, best_total, trajs = candidate, total, [cand_trajs[i] for i in range(len(val))]
                    config.save(folder.file("best_config.json"))
                entry.runs_so_far = round(ctx.ledger.equivalent_runs(), 2)
                history.append(entry)
                self.print_iteration(entry)
            folder.checkpoint(ctx, {STATE_FILE: {
                "trials": [_record(t) for t in study.get_trials(deepcopy=False) if t.state.is_finished()],
                "sampler": base64.b64encode(pickle.dumps(sampler)).decode("ascii"),
                "config": config.to_dict(), "best_total": best_total, "history": [e.to_dict() for e in history]}})
        end_as_planned(self.until_cap, ctx.caps, "TPE")
        finished = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished()]
        extras.update(trials=len(finished), scored=len(history),
                      pruned=sum(e.val_candidate is None for e in history),
                      accepted=sum(e.accepted for e in history), distinct_configurations=len(seen),
                      changed=[n for n in names if config[n] != initial[n]])
        self.console.print(f"  {len(history)} trials scored ({extras['pruned']} pruned) · validation "
                           f"{best_total:.3f} · runs {ctx.ledger.equivalent_runs():.1f} · {extras['ended']}")
        return MethodOutcome(config=SystemConfig(config), history=history, extras={self.name: extras})


def _key(params: dict, names: list[str]) -> tuple[int, ...]:
    return tuple(int(params[n]) for n in names)


def _kind(system, changed: list[str]) -> str | None:
    """The configuration kind the trial changed (None when it changed several kinds)."""
    kinds = {system.components[n].kind.value for n in changed}
    return kinds.pop() if len(kinds) == 1 else None


def _replay(study: optuna.Study, trial: optuna.Trial, earlier: FrozenTrial) -> None:
    """Tell a repeated proposal the earlier trial's result, minibatch by minibatch."""
    for step, value in sorted(earlier.intermediate_values.items()):
        trial.report(value, step)
    if earlier.state is TrialState.COMPLETE:
        study.tell(trial, earlier.value)
    else:
        study.tell(trial, state=TrialState.PRUNED)


def _record(trial: FrozenTrial) -> dict:
    """A finished trial as JSON: what `_rebuilt` needs to add it to a fresh study unchanged."""
    return {"state": trial.state.name, "value": trial.value, "params": trial.params,
            "intermediate": {str(step): v for step, v in trial.intermediate_values.items()},
            "system_attrs": trial.system_attrs}


def _rebuilt(record: dict, distributions: dict) -> FrozenTrial:
    return optuna.trial.create_trial(
        state=TrialState[record["state"]], value=record["value"], params=record["params"],
        distributions={n: distributions[n] for n in record["params"]},
        intermediate_values={int(step): v for step, v in record["intermediate"].items()},
        system_attrs=record["system_attrs"])
