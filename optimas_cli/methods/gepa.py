"""GEPA baseline: the real `gepa` package's `gepa.optimize` on the pipeline's prompt components.

A GEPA candidate maps each PROMPT component to its instruction; the seed candidate is the pipeline's
initial configuration. GEPA evolves it by reflective mutation: it picks a candidate from its Pareto
front over the validation examples, runs it on a training minibatch, has the reflection LM rewrite one
component's instruction (round robin) from that component's inputs, outputs and the metric's feedback,
runs the child on the same minibatch, and, if the child's minibatch sum is strictly higher, scores it on
the whole validation split and adds it to its pool. Both the system and the reflection use the run's
LM, through our LM layer (methods/gepa_adapter.py): calls are cached and counted, and every system run
GEPA triggers is in the run ledger (executed runs per phase).

Budget: GEPA's `max_metric_calls` (one call = one example scored). Set explicitly, or, in a run with a
run cap (budget.max_runs, or budget.max_runs_from=optimas for matched cost), none: the cap alone ends the
search where it is spent (a count would bind first, since a call on a cached parent costs less than one
component's run: cap x K calls ended a PubMedQA run at 52 of its 65 runs); before any system run the adapter checks the caps with that evaluation's cost
ahead, so the cap is never crossed, and GEPA stops at the next iteration. Without a cap, budget.
iterations proposals' worth: the seed's validation, then per proposal the parent and the child on a
minibatch and the child on validation.

History: one entry per proposal GEPA judged, either rejected on its training minibatch (nothing
validated) or scored on validation, `accepted` when that total is strictly above the best so far (a
child below it still joins GEPA's pool, where it may parent later proposals).

Final configuration: GEPA's best candidate (the highest validation mean), kept only if its validation
total is strictly above the initial configuration's (the gate of the other methods; GEPA's validation
set is our whole validation split, so no extra run is needed), else the initial configuration.
Choice and weights components keep their defaults and are listed under `left_unchanged`. A killed run
starts over (GEPA's state is not checkpointed with the run's accounts).
"""
from __future__ import annotations

import logging
from importlib.metadata import version

import gepa

from optimas_cli.errors import UserError
from optimas_cli.methods.base import Method, MethodOutcome
from optimas_cli.methods.cost import Conditions, Estimate, full_runs
from optimas_cli.methods.gepa_adapter import REFLECTION_TAG, CapReached, RunReflectionLM, SystemAdapter
from optimas_cli.optim.history import HistoryEntry
from optimas_cli.progress import phase
from optimas_cli.system import ConfigKind, SystemConfig
from optimas_cli.system.budget import Budget
from optimas_cli.system.caps import cap_reached, end_as_planned

log = logging.getLogger("optimas")


class _RunLog:
    """GEPA's logger: its lines go to the run's log, not stdout."""

    def log(self, message: str) -> None:
        log.debug("gepa: %s", message)


class HistoryRecorder:
    """GEPA's callbacks, turned into one HistoryEntry per proposal GEPA judged, and GEPA's stop rule for
    the run: a reached cap, or an error GEPA would otherwise go on past (re-raised after GEPA returns)."""

    def __init__(self, method: GEPA, ctx, n_val: int, reflection: RunReflectionLM):
        self.method, self.ctx, self.n_val, self.reflection = method, ctx, n_val, reflection
        self.history: list[HistoryEntry] = []
        self.best_total: float | None = None  # the best validation total so far (the seed's first)
        self.parent: dict = {}  # the candidate GEPA mutates this iteration
        self.proposal: dict | None = None  # what the reflection changed in it
        self.error: BaseException | None = None

    def __call__(self, state) -> bool:  # a GEPA stopper, asked before each iteration
        # an evaluation the cap could not hold (CapReached, caught by GEPA) set caps.stopped with runs still
        # left: stop there too, or GEPA would select, reflect and be refused again forever
        stopped = self.ctx.caps is not None and self.ctx.caps.stopped is not None
        return self.failure() is not None or stopped or cap_reached(self.ctx)

    def failure(self) -> BaseException | None:
        """An error in an evaluation or in the reflection LM, which GEPA logged and went on past."""
        return self.error or self.reflection.error

    def on_candidate_selected(self, event) -> None:
        self.parent = event["candidate"]

    def on_proposal_end(self, event) -> None:
        texts = event["new_instructions"]
        self.proposal = {n: t for n, t in texts.items() if self.parent.get(n) != t} or dict(texts)

    def on_valset_evaluated(self, event) -> None:
        total = float(sum(event["scores_by_val_id"].values()))
        if event["candidate_idx"] == 0:
            self.best_total = total
            return
        before = self.best_total
        accepted = total > before
        self._entry(val_candidate=total, accepted=accepted, val_after=total if accepted else before,
                    note="" if accepted else "kept in GEPA's pool, below the best validation total",
                    details={"gepa_candidate": event["candidate_idx"], "parents": list(event["parent_ids"])})
        if accepted:
            self.best_total = total

    def on_candidate_rejected(self, event) -> None:
        self._entry(val_candidate=None, accepted=False, val_after=self.best_total,
                    note=f"rejected by GEPA on its training minibatch (sum {event['old_score']:g} -> "
                         f"{event['new_score']:g})", details={})

    def on_error(self, event) -> None:
        if not isinstance(event["exception"], CapReached) and self.error is None:
            self.error = event["exception"]

    def _entry(self, **fields) -> None:
        proposal, self.proposal = self.proposal or {}, None
        entry = HistoryEntry(iteration=len(self.history) + 1, component=sorted(proposal) or None, kind="prompt",
                             proposal=proposal, val_before=self.best_total, n=self.n_val,
                             runs_so_far=round(self.ctx.ledger.equivalent_runs(), 2), **fields)
        self.history.append(entry)
        self.method.print_iteration(entry)


class GEPA(Method):
    optimizes = frozenset({ConfigKind.PROMPT})
    """gepa.optimize with GEPA's defaults (Pareto candidate selection, round-robin components,
    minibatches of `reflection_minibatch_size`), seeded; `max_metric_calls` null: from the run cap, else
    budget.iterations (module docstring)."""

    def __init__(self, budget: Budget, name: str = "gepa", console=None, seed: int = 0,
                 max_metric_calls: int | None = None, reflection_minibatch_size: int = 3,
                 candidate_selection: str = "pareto", module_selector: str = "round_robin",
                 max_tokens: int = 512, temperature: float = 1.0):
        super().__init__(name, budget, console)
        self.seed = int(seed)
        self.max_metric_calls = None if max_metric_calls is None else int(max_metric_calls)
        self.minibatch_size = int(reflection_minibatch_size)
        self.candidate_selection, self.module_selector = str(candidate_selection), str(module_selector)
        self.max_tokens, self.temperature = int(max_tokens), float(temperature)

    def prompt_proposer(self, pipeline, ctx) -> str:
        return "lm"

    def estimate(self, pipeline, splits, conditions: Conditions) -> Estimate:
        """GEPA's metric calls, each one example through the system, and a reflection per proposal."""
        est, n_val = Estimate(), len(splits.val)
        calls = (self.max_metric_calls if self.max_metric_calls is not None
                 else n_val + self.budget.iterations * (2 * self.minibatch_size + n_val))
        est.assume(f"gepa spends its {calls} metric calls, each a whole run of one example (an upper bound: a cached "
                   "parent makes one cheaper)")
        full_runs(pipeline.system, calls, est.phases["local_optimization"])
        est.phases["local_optimization"].calls[REFLECTION_TAG] += self.budget.iterations
        return est

    def metric_calls(self, components: int, val_size: int, ctx) -> tuple[int | None, bool]:
        """GEPA's max_metric_calls, and whether the run cap (not that count) is meant to end the search."""
        if self.max_metric_calls is not None:
            return self.max_metric_calls, False
        if ctx.caps is not None and ctx.caps.max_runs is not None:
            return None, True  # no count: a call can cost less than 1/K runs (a cached parent), so any count can bind first
        return val_size + self.budget.iterations * (2 * self.minibatch_size + val_size), False

    def optimize(self, pipeline, splits, ctx, folder) -> MethodOutcome:
        system = pipeline.system
        prompt_names = self.fit(pipeline)
        if ctx.lm is None:
            raise UserError("gepa's reflection needs an LM, but this run has none configured", "set lm=local (or another)")
        initial = system.default_config()
        adapter = SystemAdapter(pipeline, splits, prompt_names, ctx)
        reflection = RunReflectionLM(ctx.replace(phase="local_optimization"), self.max_tokens, self.temperature)
        max_calls, until_cap = self.metric_calls(len(system), len(splits.val), ctx)
        recorder = HistoryRecorder(self, ctx, len(splits.val), reflection)
        self.console.print(f"[bold]GEPA[/] · {prompt_names} · "
                           + (f"until the run cap of {ctx.caps.max_runs:g} executed runs" if until_cap
                              else f"max_metric_calls {max_calls}")
                           + f" · minibatches of {self.minibatch_size}")
        result, ended = None, ""
        with phase("GEPA", lm=ctx.lm):
            try:
                result = gepa.optimize(
                    seed_candidate={n: initial[n] for n in prompt_names}, trainset=adapter.data("train"),
                    valset=adapter.data("val"), adapter=adapter, reflection_lm=reflection,
                    candidate_selection_strategy=self.candidate_selection, module_selector=self.module_selector,
                    reflection_minibatch_size=self.minibatch_size, max_metric_calls=max_calls,
                    stop_callbacks=recorder, callbacks=[recorder], logger=_RunLog(), seed=self.seed,
                    raise_on_exception=False)  # a cap ends an iteration midway; the stopper then ends GEPA
            except CapReached:  # before the seed candidate's validation: nothing to choose from
                ended = str(ctx.caps.stopped)
        if recorder.failure() is not None:
            raise recorder.failure()
        if ctx.caps is not None and ctx.caps.stopped is not None:
            ended = str(ctx.caps.stopped)
        elif result is not None:
            ended = (f"max_metric_calls={max_calls} reached" if max_calls is not None and result.total_metric_calls >= max_calls
                     else "GEPA stopped")
        end_as_planned(until_cap, ctx.caps, "GEPA")
        config, extras = initial, {}
        if result is not None:
            totals = [float(sum(scores.values())) for scores in result.val_subscores]
            kept = result.best_idx if totals[result.best_idx] > totals[0] else 0
            config = adapter.config_for(result.candidates[kept])
            extras = {"metric_calls": result.total_metric_calls, "candidates": result.num_candidates,
                      "full_val_evals": result.num_full_val_evals, "best_candidate": result.best_idx,
                      "kept_candidate": kept, "initial_val_mean": totals[0] / len(splits.val),
                      "best_val_mean": totals[result.best_idx] / len(splits.val)}
        changed = [n for n in prompt_names if config[n] != initial[n]]
        extras = {"implementation": f"gepa {version('gepa')}", "components": prompt_names,
                  "left_unchanged": {n: c.kind.value for n, c in system.components.items()
                                     if c.kind is not ConfigKind.PROMPT},
                  "max_metric_calls": max_calls, "until_cap": until_cap, "ended": ended,
                  "reflection_calls": reflection.calls, "reflection_minibatch_size": self.minibatch_size,
                  "candidate_selection": self.candidate_selection, "module_selector": self.module_selector,
                  **extras, "changed": changed}
        self.console.print(f"  {len(recorder.history)} proposals judged · changed {changed} · "
                           f"runs {ctx.ledger.equivalent_runs():.1f} · {ended}")
        return MethodOutcome(config=SystemConfig(config), history=recorder.history, extras={self.name: extras})
