"""Plain global-reward search: coordinate ascent over the configuration space, every candidate scored
by the summed global reward on the validation split. No local reward, no search sample, no Stage 2.

Each sweep visits the optimizable components in a seeded random order; at each it tries every
candidate value in turn (a choice's other values; a prompt's pipeline instructions and structured
edits of the current one, prompt_pool.fixed_drafts, so no LM writes them) and keeps one only if the
validation total is strictly higher (the paper's gate). A candidate re-runs the changed component and
what follows it on the cached validation trajectories, so its cost, in executed system runs, is what
Algorithm 1's validation pass of the same change costs. Sweeps repeat until one changes nothing, or
`sweeps` are done, or a budget cap (budget.max_runs, budget.max_runs_from=optimas) would be crossed.
Per-instance choices are searched as global choices, as global_reward does (a route needs a reward
model that scores unseen inputs); weights components are left unchanged (no finite set to enumerate).
"""
from __future__ import annotations

import numpy as np
from rich.console import Console

from optimas_cli.methods.base import Method, MethodOutcome
from optimas_cli.methods.cost import Conditions, Estimate, full_runs, rerun_counts, scaled
from optimas_cli.methods.global_reward import with_global_choices
from optimas_cli.optim.history import HistoryEntry
from optimas_cli.optim.prompt_pool import fixed_drafts
from optimas_cli.system import ConfigKind
from optimas_cli.system.budget import Budget
from optimas_cli.system.caps import cap_reached
from optimas_cli.system.evaluate import rewards

SEARCHED = (ConfigKind.PROMPT, ConfigKind.CHOICE)


class CoordinateAscent(Method):
    optimizes = frozenset(SEARCHED)

    def __init__(self, budget: Budget, name: str = "coordinate_ascent", console: Console | None = None, seed: int = 0,
                 sweeps: int | None = None):
        super().__init__(name, budget, console)
        self.seed, self.sweeps = int(seed), None if sweeps is None else int(sweeps)

    def prompt_proposer(self, pipeline, ctx):
        return "pool" if any(c.kind is ConfigKind.PROMPT for c in pipeline.system.components.values()) else None

    @staticmethod
    def candidates(component, current) -> list:
        if component.kind is ConfigKind.CHOICE:
            return [v for v in component.candidate_values() if v != current]
        return [d.text for d in fixed_drafts(component, current or "")]

    def estimate(self, pipeline, splits, conditions: Conditions) -> Estimate:
        """The opening validation pass, then each sweep's candidates, each a re-run of the changed component and
        what follows it on validation. `sweeps=null` ends on a sweep that changes nothing: planned as two."""
        view, est = with_global_choices(pipeline), Estimate()
        system, n_val, config = view.system, len(splits.val), view.system.default_config()
        sweeps = self.sweeps if self.sweeps is not None else 2
        if self.sweeps is None:
            est.assume("coordinate_ascent's sweeps=null is planned as 2 sweeps (one that changes something, one that "
                       "changes nothing), each with the initial configuration's candidates")
        full_runs(system, n_val, est.phases["validation"])
        for name in self.targets(view):
            tried = len(self.candidates(system.components[name], config[name]))
            scaled(lambda p, n=name: rerun_counts(system, n, n_val, config, p), sweeps * tried, est.phases["validation"])
        return est

    def optimize(self, pipeline, splits, ctx, folder) -> MethodOutcome:
        view = with_global_choices(pipeline)
        system, val, vctx = view.system, list(splits.val), ctx.replace(phase="validation")
        names = self.fit(view)
        skipped = {n: c.kind.value for n, c in system.components.items() if c.kind is ConfigKind.WEIGHTS}
        config, history, rng = system.default_config(), [], np.random.default_rng(self.seed)
        extras = {"searched": names, "left_unchanged": skipped, "sweeps_done": 0, "evaluated": 0, "converged": False}

        if cap_reached(ctx, {"max_runs": system.rerun_cost(None, len(val), config)}):
            return MethodOutcome(config=config, extras={self.name: extras})
        with ctx.ledger.timed("validation"):
            trajs = system.run(val, config, vctx)
        scores = rewards(view, trajs)
        self.console.print(f"[bold]coordinate ascent[/] · {len(names)} components · validation {sum(scores):.3f}")
        sweep, stopped = 0, False
        while not stopped and (self.sweeps is None or sweep < self.sweeps):
            changed = False
            for name in (names[i] for i in rng.permutation(len(names))):
                component = system.components[name]
                for value in self.candidates(component, config[name]):
                    candidate = config.replace(name, value)
                    if cap_reached(ctx, {"max_runs": system.rerun_cost(name, len(val), candidate)}):
                        stopped = True
                        break
                    with ctx.ledger.timed("validation"), ctx.ledger.provisional() as validation_pass:
                        cand_trajs = system.run_from(name, trajs, candidate, vctx)
                        cand_scores = rewards(view, cand_trajs)
                    accepted = sum(cand_scores) > sum(scores)
                    entry = HistoryEntry(iteration=len(history) + 1, component=name, kind=component.kind.value,
                                         proposal=value, val_before=sum(scores), val_candidate=sum(cand_scores),
                                         val_after=sum(cand_scores) if accepted else sum(scores), accepted=accepted,
                                         runs_so_far=0.0, n=len(val), details={"sweep": sweep + 1})
                    if accepted:
                        validation_pass.keep()  # charged as the paper charges an accepted validation pass
                        config, trajs, scores, changed = candidate, cand_trajs, cand_scores, True
                        config.save(folder.file("best_config.json"))
                    entry.runs_so_far = round(ctx.ledger.equivalent_runs(), 2)
                    history.append(entry)
                    extras["evaluated"] += 1
                if stopped:
                    break
            sweep += 1
            extras["sweeps_done"] = sweep if not stopped else sweep - 1
            if not changed:
                break
        extras["converged"] = not stopped and not changed
        self.console.print(f"  {extras['evaluated']} candidates in {sweep} sweep(s) · validation {sum(scores):.3f}"
                           f" · runs {ctx.ledger.equivalent_runs():.1f}")
        return MethodOutcome(config=config, history=history, extras={self.name: extras})
