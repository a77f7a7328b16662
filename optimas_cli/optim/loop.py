"""Algorithm 1: pick a component, optimize it locally against r_k, gate on validation, adapt the LRFs.

Reads top to bottom as the paper's loop. What an accepted update makes stale (the search sample's
trajectories, the local rewards around the changed component) is brought up to date at the start of the
iteration that needs it, so an update is kept whatever room the cap leaves after it, and nothing is
prepared for an iteration that never comes. Every iteration is checkpointed (configuration, validation
total, history, random state, the configuration the search sample was run under) so a killed run
resumes at the next iteration with the same history.
"""
from __future__ import annotations

import copy
import itertools
import logging
import math
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np

from optimas_cli.errors import UserError
from optimas_cli.optim import optimize_component
from optimas_cli.optim.gate import ValidationGate
from optimas_cli.optim.history import HistoryEntry
from optimas_cli.optim.race import Evaluated, example_runs, race, ranked_candidates
from optimas_cli.optim.scheduler import ComponentScheduler
from optimas_cli.optim.settings import ChoiceSettings, RaceSettings, WeightsSettings, typed
from optimas_cli.progress import phase
from optimas_cli.system import Pipeline, RunContext, SystemConfig, Trajectory, routes_by_lrf
from optimas_cli.system.budget import Budget
from optimas_cli.system.caps import (
    BudgetExhausted,
    cap_reached,
    end_as_planned,
    ends_at_run_cap,
    iterations_in_words,
    runs_left,
    stops_mid_phase,
)
from optimas_cli.system.evaluate import rewards
from optimas_cli.system.ledger import SEARCH_SAMPLE_PHASE
from optimas_cli.system.local_reward import LocalReward
from optimas_cli.system.run_folder import RunFolder, adapters_found_in, uncounted

log = logging.getLogger("optimas")
STATE_FILE = "loop_state.json"
OPTIMIZER_SECTIONS = ("prompt", "choice", "weights", "race")  # race: optim/race.py, the loop's own
# Stage 2 (LRF adaptation): lazy refreshes the picked component's r_k when an accepted update upstream or
# downstream of it came after its pairs; paper adapts every r_k after every accepted update; none never adapts.
ADAPTATION_MODES = ("lazy", "paper", "none")


@dataclass
class LoopSettings:
    iterations: int
    search_size: int
    scheduler: str = "uniform"
    optimizer: dict | None = None  # per-kind settings handed to the local optimizers
    seed: int = 0
    gate: str = "strict"  # ValidationGate rule: strict (the paper) | paired
    gate_alpha: float = 0.1
    adaptation: str = "lazy"  # ADAPTATION_MODES; the loop adapts only when handed an adapter
    # A matched-cost run (budget.max_runs_from): the run cap, not `iterations`, ends the loop, so the
    # baseline spends what the reference spent (as DSPy's trials and TextGrad's steps are sized from it).
    until_cap: bool = False

    @classmethod
    def from_budget(cls, budget: Budget, scheduler: str, optimizer: dict | None, seed: int,
                    work_dir: str, gate: str = "strict", gate_alpha: float = 0.1,
                    optimizer_lm: str | None = None, adaptation: str = "lazy") -> LoopSettings:
        """The loop's sizes come from the budget: T iterations, the search sample, and Table 7's
        prompt candidates x steps for the prompt optimizer (unless its own settings say otherwise)."""
        opt = {k: dict(v or {}) for k, v in (optimizer or {}).items()}
        unknown = sorted(set(opt) - set(OPTIMIZER_SECTIONS))
        if unknown:
            raise UserError(f"unknown optimizer section(s) {', '.join(f'optimizer.{k}' for k in unknown)}",
                            f"use {', '.join(f'optimizer.{k}' for k in OPTIMIZER_SECTIONS)}")
        prompt = opt.setdefault("prompt", {})
        prompt.setdefault("num_candidates", budget.num_candidates)
        prompt.setdefault("num_steps", budget.num_steps)
        if optimizer_lm:  # a separate, stronger model writes the prompt proposals
            prompt.setdefault("lm", optimizer_lm)
        opt.setdefault("weights", {}).setdefault("work_dir", work_dir)
        opt.setdefault("choice", {})
        race = opt.pop("race", {})
        for section in opt.values():
            section.setdefault("seed", seed)
        opt["race"] = typed(RaceSettings, race, "optimizer.race")
        # Checked now, so a mistyped key fails at start-up rather than at the first iteration of its kind.
        opt["choice"] = typed(ChoiceSettings, opt["choice"], "optimizer.choice")
        opt["weights"] = typed(WeightsSettings, opt["weights"], "optimizer.weights")
        ValidationGate(gate, gate_alpha)  # a bad rule or level fails here, before anything is spent
        if adaptation not in ADAPTATION_MODES:
            raise UserError(f"unknown method.adaptation {adaptation!r}", f"use one of {', '.join(ADAPTATION_MODES)}")
        return cls(iterations=budget.iterations, search_size=budget.search_size, scheduler=scheduler,
                   optimizer=opt, seed=seed, gate=gate, gate_alpha=float(gate_alpha), adaptation=adaptation,
                   until_cap=bool(budget.max_runs_from))

    def ends_at_cap(self, caps) -> bool:
        """Whether the run cap, not `iterations`, ends the loop under the run's caps."""
        return ends_at_run_cap(self.until_cap, caps)

    def length(self, caps) -> str:
        """How long the loop runs under the run's caps, in the words the terminal prints at its start."""
        return iterations_in_words(self.until_cap, self.iterations, caps)


def local_spend_seen(history: Sequence[HistoryEntry], name: str, kind: str) -> float:
    """The system runs a local search of `name` is expected to spend: the most one of its own earlier searches
    spent, or before its first, the least a search of another component of the same configuration `kind` did
    (Amazon's two LoRA nodes run the same GRPO: random reward s0 spent 21.3 runs on the analyzer's first
    search, exactly what each profiler search cost, and then had no room to validate it). 0 with neither."""
    own = [e.details.get("local_runs", 0.0) for e in history if e.component == name]
    if own:
        return max(own)
    return min((e.details["local_runs"] for e in history if e.kind == kind and "local_runs" in e.details), default=0.0)


def rejected_before(history: Sequence[HistoryEntry], name: str, value: Any) -> HistoryEntry | None:
    """The entry whose validation rejected `value` for `name` since the validated system last changed (an
    accepted update, or an adaptation whose LRF-routed choices were kept before that entry's validation)."""
    for entry in reversed(history):
        if entry.accepted:
            return None
        if entry.component == name and entry.val_candidate is not None and entry.proposal == value:
            return entry
        if routes_changed(entry):
            return None
    return None


def routes_changed(entry: HistoryEntry) -> bool:
    """Whether the entry's adaptation changed what the LRF routes pick (its re-validated routes were kept)."""
    return (entry.details.get("adaptation") or {}).get("routes") == "kept"


def race_contradicted(history: Sequence[HistoryEntry], name: str) -> bool:
    """Whether the last race of `name` was won by another candidate than the one its r_k ranked first, with no
    refresh of its r_k since (optim/race.py): what makes lazy adaptation re-collect its pairs."""
    for entry in reversed(history):  # within an entry the race follows its adaptation
        if entry.component == name and "contradicts_lrf" in entry.details.get("race", {}):
            return bool(entry.details["race"]["contradicts_lrf"])
        if name in (entry.details.get("adaptation") or {}).get("components", []):
            return False
    return False


def accepted_versions(history: Sequence[HistoryEntry]) -> dict[str, int]:
    """Each component's configuration version: the accepted updates of it so far."""
    return dict(Counter(e.component for e in history if e.accepted and isinstance(e.component, str)))


def gate_verdict(decision) -> str:
    """Why the gate rejected a candidate, in words."""
    if decision.rule == "strict":
        return "rejected by the gate: the validation total is not strictly higher"
    return f"rejected by the gate: the paired lower bound {decision.ci_low:.4f} of the mean gain is not above 0"


class OptimasLoop:
    """`lrf` scores a component's outputs: `lrf.score(name, inputs, outputs) -> list[float]` (a trained
    LocalRewardModel, or a baseline's scorer). A scorer that needs the current search trajectories
    (e.g. the global-reward ablation, which runs the rest of the system) may define
    `observe(trajectories, config)`; the loop calls it whenever they change.
    `adapt` is Stage 2 (lrf/stage.Stage2: fresh pairs + replay), run as `settings.adaptation` says; None
    disables it (optimas_no_adapt). It offers `adapt(config, ctx, names, n_inputs, versions)`,
    `stale(names, versions, whole_system)`, `expected_runs(config, ctx, names, n_inputs)`,
    `scores_changed_by(names)` and `fresh_size`.
    `on_iteration(entry)` reports progress; `save_lrf()` checkpoints the adapted LRF.
    `schedulable()` names the components the scheduler may pick now (None: all of them).
    `carry` is method state to checkpoint with each iteration: `state() -> dict`, `restore(dict)`.
    With `optimizer.race.shortlist` >= 2 the candidates the local optimizer ranks race on validation minibatches
    before the gate (optim/race.py); a race won against r_k's ranking makes lazy adaptation refresh that r_k.
    """

    def __init__(
        self,
        pipeline: Pipeline,
        train: Sequence[dict],
        val: Sequence[dict],
        ctx: RunContext,
        lrf: LocalReward,
        settings: LoopSettings,
        folder: RunFolder,
        adapt: Any = None,
        save_lrf: Callable[[], None] | None = None,
        on_iteration: Callable[[HistoryEntry], None] | None = None,
        schedulable: Callable[[], Sequence[str]] | None = None,
        carry: Any = None,
    ):
        self.pipeline, self.system = pipeline, pipeline.system
        self.schedulable, self.carry = schedulable, carry
        self.train, self.val = list(train), list(val)
        self.ctx, self.lrf, self.settings, self.folder = ctx, lrf, settings, folder
        self.adapt, self.save_lrf, self.on_iteration = adapt, save_lrf, on_iteration
        optimizable = [n for n in self.system.order if self.system.components[n].kind.value != "none"]
        self.scheduler = ComponentScheduler(optimizable, settings.scheduler)
        self.race = typed(RaceSettings, (settings.optimizer or {}).get("race"), "optimizer.race")
        self.gate = ValidationGate(settings.gate, settings.gate_alpha, seed=settings.seed)
        if settings.adaptation not in ADAPTATION_MODES:
            raise UserError(f"unknown method.adaptation {settings.adaptation!r}", f"use one of {', '.join(ADAPTATION_MODES)}")
        if settings.adaptation == "none":
            self.adapt = None

    # -- state ----------------------------------------------------------------------------------
    def _load_or_start(self) -> tuple[int, SystemConfig, list[HistoryEntry], np.random.Generator, SystemConfig]:
        """(iterations done, configuration, history, random state, the configuration the search sample was
        last run under: an accepted update re-runs it only when the next iteration needs it)."""
        rng = np.random.default_rng(self.settings.seed)
        state = self.folder.read_json(STATE_FILE)
        if state is None:
            return 0, self.system.default_config(), [], rng, self.system.default_config()
        rng.bit_generator.state = state["rng"]
        if self.carry is not None:
            self.carry.restore(state["carry"])
        log.info("resuming Algorithm 1 after iteration %d", state["iteration"])
        history = [HistoryEntry.from_dict(e) for e in state["history"]]
        config = SystemConfig(adapters_found_in(state["config"], self.folder.path))  # the folder may have moved
        searched = SystemConfig(adapters_found_in(state["search_config"], self.folder.path))
        return state["iteration"], config, history, rng, searched

    def _checkpoint(self, done: int, config: SystemConfig, history: list[HistoryEntry],
                    rng: np.random.Generator, searched: SystemConfig) -> None:
        config.save(self.folder.file("best_config.json"))
        carry = None if self.carry is None else self.carry.state()  # Stage 2's LRF weights: saved under a new name
        # One commit with the accounts: a kill anywhere in the checkpoint, the weights' save included, resumes
        # from the whole of this checkpoint or of the previous one (RunFolder.checkpoint).
        self.folder.checkpoint(self.ctx, {STATE_FILE: {
            "iteration": done, "config": config.to_dict(), "search_config": searched.to_dict(),
            "history": [e.to_dict() for e in history], "rng": rng.bit_generator.state, "carry": carry}})

    def _validate(self, trajs: list[Trajectory]) -> list[float]:
        """Per-example validation rewards: the gate compares them example by example."""
        return rewards(self.pipeline, trajs)

    # -- the loop -------------------------------------------------------------------------------
    def run_within_caps(self) -> tuple[SystemConfig, list[HistoryEntry]]:
        """run(), the caps checked after every batch of component executions (system/caps.stops_mid_phase):
        a step of unknown cost (a local search, every value of a router scored) that crosses a cap ends the
        run at the last checkpoint, the step in progress dropped (a resume with a raised cap redoes it)."""
        try:
            with stops_mid_phase(self.ctx):
                return self.run()
        except BudgetExhausted as stop:
            log.info("%s mid-iteration; returning the last checkpoint", stop)
            end_as_planned(self.settings.until_cap, self.ctx.caps, "the loop")
            return self.last_checkpoint()

    def last_checkpoint(self) -> tuple[SystemConfig, list[HistoryEntry]]:
        """The configuration and history of the last checkpoint (the unoptimized system before the first)."""
        state = self.folder.read_json(STATE_FILE)
        if state is None:
            return self.system.default_config(), []
        return (SystemConfig(adapters_found_in(state["config"], self.folder.path)),
                [HistoryEntry.from_dict(e) for e in state["history"]])

    def run(self) -> tuple[SystemConfig, list[HistoryEntry]]:
        resumed = self.folder.file(STATE_FILE).exists()
        start, config, history, rng, searched = self._load_or_start()
        opening = self.system.rerun_cost(None, len(self.val) + min(self.settings.search_size, len(self.train)), config)
        if not resumed and cap_reached(self.ctx, {"max_runs": opening}):
            return config, history  # stopped before the opening validation: nothing of the loop to save
        vctx = self.ctx.replace(phase="validation", lrf=self.lrf)
        octx = self.ctx.replace(phase="local_optimization", lrf=self.lrf)
        sctx = self.ctx.replace(phase=SEARCH_SAMPLE_PHASE, lrf=self.lrf)
        # Cached trajectories: validation re-runs only the changed component and what follows it;
        # the search sample's cached inputs feed the local optimizers. A resumed run rebuilds them
        # uncounted: the checkpoint's accounts already hold them.
        with uncounted(self.ctx) if resumed else nullcontext():
            with self.ctx.ledger.timed("validation"):
                val_trajs = self.system.run(self.val, config, vctx)
                val_scores = self._validate(val_trajs)
            with self.ctx.ledger.timed("local_optimization"):
                search = self.system.run(self.train[: self.settings.search_size], searched, sctx)
        if not resumed:
            self.gate.log_detectable(val_scores)
        self._observe(search, searched)
        if start == 0:
            self._checkpoint(0, config, history, rng, searched)

        until_cap = self.settings.ends_at_cap(self.ctx.caps)
        idle = 0  # iterations in a row that spent no system run: a stretched loop stops after `iterations`
        for t in itertools.count(start) if until_cap else range(start, self.settings.iterations):
            if cap_reached(self.ctx):  # a safe point: everything up to here is checkpointed
                break
            if idle >= self.settings.iterations:
                log.info("matched cost: %d iterations in a row spent nothing; the loop ends under its cap", idle)
                break
            spent_before = self.ctx.ledger.equivalent_runs()
            name = self.scheduler.pick(t, history, rng, self.schedulable() if self.schedulable else None)
            component = self.system.components[name]
            # What this iteration will spend, where known: re-running the search sample from the updates since
            # it was run, the local search (as its earlier ones spent, see local_spend_seen) and the validation
            # pass. A proposal the cap leaves no room to validate can never be accepted: stop before anything.
            behind = [n for n in self.system.order if config[n] != searched[n]]
            catch_up = self.system.rerun_cost(behind, len(search), config) if behind else 0.0
            own = (catch_up + local_spend_seen(history, name, component.kind.value)
                   + self.system.rerun_cost(name, self._validation_examples(component), config))
            names, n_fresh, skipped = self._adaptation_due(name, config, history, own)
            if cap_reached(self.ctx, {"max_runs": own + self._adaptation_ahead(config, names, n_fresh)}):
                break  # not checkpointed: a resume redoes the iteration
            entry = HistoryEntry(iteration=t + 1, component=name, kind=component.kind.value, proposal=None,
                                 val_before=sum(val_scores), val_after=sum(val_scores), accepted=False,
                                 runs_so_far=0.0, n=len(self.val))
            if behind:  # the search sample follows the accepted updates since it was last run
                with self.ctx.ledger.timed("local_optimization"):
                    search = self.system.run_changed(behind, search, config, sctx)
                searched = config
                self._observe(search, config)
            if n_fresh:
                val_trajs, val_scores, search = self._adapt(config, names, n_fresh, history, val_trajs, val_scores,
                                                            search, entry, vctx, sctx)
                entry.val_before = entry.val_after = sum(val_scores)
                if name in names and race_contradicted(history, name):
                    entry.details["adaptation"]["trigger"] = "the last race of this component contradicted its r_k"
            if skipped:  # a lazy refresh cut short (or out) by the run cap
                entry.details.setdefault("adaptation", {"components": names})["note"] = skipped
            search_inputs = [tr.steps[name]["inputs"] for tr in search if not tr.steps[name]["skipped"]]
            local_start = self.ctx.ledger.equivalent_runs()
            with self.ctx.ledger.timed("local_optimization"), phase(f"iteration {t + 1} · optimizing {name}", lm=self.ctx.lm):
                proposal = optimize_component(
                    component, config[name], search_inputs, self.lrf, octx, self.settings.optimizer, rng=rng
                )
            entry.proposal, entry.local_score, entry.baseline_local_score = (
                proposal.value, proposal.local_score, proposal.baseline_score)
            entry.details["local_runs"] = round(self.ctx.ledger.equivalent_runs() - local_start, 2)  # this search's spend
            if "held_out" in proposal.details:  # a weights proposal's r_k before/after on held-out search inputs
                entry.details["held_out"] = proposal.details["held_out"]
            head = None  # the race winner's validation so far: the gate's pass runs only the rest
            shortlist = self._shortlist(name, proposal, config, history, entry)
            if shortlist:
                with (self.ctx.ledger.timed("validation"), phase(f"iteration {t + 1} · race", lm=self.ctx.lm)):
                    raced, head = self._race(name, shortlist, config, val_trajs, val_scores, vctx, entry)
                if raced is None:  # a rung would have crossed the cap; not checkpointed: a resume redoes it
                    entry.note = f"race stopped: {self.ctx.caps.stopped}"
                    entry.runs_so_far = round(self.ctx.ledger.equivalent_runs(), 2)
                    history.append(entry)
                    break
                entry.proposal = proposal.value = raced
            earlier = None if routes_changed(entry) else rejected_before(history, name, proposal.value)
            if proposal.value != config[name] and earlier is not None:
                # The gate's verdict on this candidate against this configuration is already known.
                entry.note = (f"rejected in iteration {earlier.iteration} against this same configuration: "
                              "not validated again")
            elif proposal.value != config[name]:
                candidate = config.replace(name, proposal.value)
                # the validation pass: this component and what follows it, on every validation input (those the
                # race ran it on already are reused)
                done = len(head.scores) if head is not None else 0
                if cap_reached(self.ctx, {"max_runs": self.system.rerun_cost(name, len(self.val) - done, candidate)}):
                    # Shown in this run's results with what it spent; not checkpointed: a resume redoes the iteration.
                    entry.note = f"not validated: {self.ctx.caps.stopped}"
                    entry.runs_so_far = round(self.ctx.ledger.equivalent_runs(), 2)
                    history.append(entry)
                    break
                with (self.ctx.ledger.timed("validation"), phase(f"iteration {t + 1} · validation", lm=self.ctx.lm),
                      self.ctx.ledger.provisional() as validation_pass):
                    rest = self.system.run_from(name, val_trajs[done:], candidate, vctx) if done < len(self.val) else []
                    cand_trajs = (head.trajectories if head else []) + rest
                    cand_scores = (head.scores if head else []) + (self._validate(rest) if rest else [])
                entry.val_candidate = sum(cand_scores)
                decision = self.gate.decide(val_scores, cand_scores)  # strict (the paper) or paired
                entry.gate = decision.to_dict()
                if decision.accepted:
                    validation_pass.keep()  # the paper charges accepted updates' validation only
                    for charge in head.charges if head else []:  # the winner's validation in the race
                        charge.keep()
                    # Kept whatever room is left: what it makes stale is brought up to date when an iteration needs it.
                    config, val_trajs, val_scores = candidate, cand_trajs, cand_scores
                    entry.accepted, entry.val_after = True, sum(cand_scores)
                else:
                    entry.note = gate_verdict(decision)
            else:
                entry.note = f"the {'race' if shortlist else 'local optimizer'} kept the current value"
            entry.runs_so_far = round(self.ctx.ledger.equivalent_runs(), 2)
            idle = idle + 1 if self.ctx.ledger.equivalent_runs() == spent_before else 0
            history.append(entry)
            self._checkpoint(t + 1, config, history, rng, searched)
            if self.on_iteration is not None:
                self.on_iteration(entry)
            log.info("iteration %d: %s %s (val %.4f -> %.4f)", t + 1, name,
                     "accepted" if entry.accepted else "rejected", entry.val_before, entry.val_after)
        self._note_pending_adaptation(config, history)
        end_as_planned(self.settings.until_cap, self.ctx.caps, "the loop")
        return config, history

    def _validation_examples(self, component) -> int:
        """Validation examples an iteration on `component` runs at most: one pass, or a race's (optim/race.py)."""
        if self.race.on and component.kind.value in ("prompt", "choice") and not component.per_instance:
            return example_runs(self.race.shortlist, len(self.val), self.race)
        return len(self.val)

    def _shortlist(self, name: str, proposal, config: SystemConfig, history: Sequence[HistoryEntry],
                   entry: HistoryEntry) -> list:
        """The candidates to race (optim/race.py), best r_k first: the top `shortlist` of those the local optimizer
        ranked, less those the gate already rejected against this configuration. Empty: no race."""
        if not self.race.on:
            return []
        ranked = [(v, score) for v, score in ranked_candidates(proposal, config[name])
                  if v == config[name] or routes_changed(entry) or rejected_before(history, name, v) is None]
        return ranked[: self.race.shortlist] if len(ranked) >= 2 else []

    def _race(self, name, shortlist, config, val_trajs, val_scores, vctx, entry) -> tuple[Any, Evaluated | None]:
        """Race the shortlist's (value, r_k) on validation minibatches: (the winner, its validation so far); (None,
        None) when a rung would cross the run cap. What the race spent and decided goes into the entry."""
        contenders = [value for value, _ in shortlist]
        def evaluate(value, lo: int, hi: int) -> Evaluated:
            with self.ctx.ledger.provisional() as charge:  # charged only if this value is accepted
                trajs = self.system.run_from(name, val_trajs[lo:hi], config.replace(name, value), vctx)
                return Evaluated(trajs, self._validate(trajs), [charge])

        def fits(value, n: int) -> bool:
            return not cap_reached(self.ctx, {"max_runs": self.system.rerun_cost(name, n, config.replace(name, value))})

        start = self.ctx.ledger.equivalent_runs()
        result = race(contenders, config[name], val_scores, len(self.val), self.race, evaluate, fits)
        entry.details["race"] = {"contenders": len(contenders), "rungs": result.rungs,
                                 "runs": round(self.ctx.ledger.equivalent_runs() - start, 4)}
        if result.stopped:
            return None, None
        rank = contenders.index(result.winner)
        entry.details["race"].update(winner_lrf_rank=rank, contradicts_lrf=result.contradicts_lrf)
        entry.local_score = shortlist[rank][1]
        return result.winner, result.head

    def _adaptation_due(self, name: str, config: SystemConfig, history: Sequence[HistoryEntry],
                        own: float) -> tuple[list[str], int, str]:
        """(the components whose r_k is adapted before `name` is optimized, on how many fresh inputs, why fewer
        than budget.fresh_size or none). paper: every one, once an accepted update came after their pairs (a
        cap without room for it ends the loop). lazy: `name` only, when an accepted update upstream or downstream
        of it came after its pairs, on as many fresh inputs as the run cap leaves room for after this iteration's
        own work (`own`): a refresh never crowds out the optimization it prepares."""
        if self.adapt is None:
            return [], 0, ""
        versions, n = accepted_versions(history), self.adapt.fresh_size
        if self.settings.adaptation == "paper":
            everything = list(self.scheduler.components)
            return (everything, n, "") if self.adapt.stale(everything, versions, whole_system=True) else ([], 0, "")
        names = self.adapt.stale([name], versions)
        if not names and race_contradicted(history, name):  # the race overruled r_k: refresh its pairs
            names = [name]
        left = runs_left(self.ctx)
        if not names or left is None or own + self._adaptation_ahead(config, names, n) <= left:
            return names, (n if names else 0), ""
        per_input = self.adapt.expected_runs(config, self.ctx, names, 1)
        n = min(n - 1, math.floor((left - own - self._route_reruns(config, names)) / per_input)) if per_input > 0 else 0
        while n > 0 and own + self._adaptation_ahead(config, names, n) > left:  # float rounding: fit exactly
            n -= 1
        n = max(0, n)
        why = (f"{n} of {self.adapt.fresh_size} fresh inputs: more would not fit the run cap" if n
               else "skipped: the run cap leaves no room for it")
        return names, n, why

    def _adaptation_ahead(self, config: SystemConfig, names: Sequence[str], n_inputs: int) -> float:
        """What _adapt will execute: the collection, then the re-runs of per-input LRF routes on validation and
        search inputs (nothing without a collection). A cap then stops before it, not after."""
        if not names or not n_inputs:
            return 0.0
        return self.adapt.expected_runs(config, self.ctx, names, n_inputs) + self._route_reruns(config, names)

    def _routes_moved(self, config: SystemConfig, names: Sequence[str]) -> list[str]:
        """The per-input LRF routes whose picks adapting `names` can change."""
        moved = self.adapt.scores_changed_by(names)
        return [n for n in self.system.order if routes_by_lrf(config[n]) and (moved is None or n in moved)]

    def _route_reruns(self, config: SystemConfig, names: Sequence[str]) -> float:
        """The re-runs of those routes on validation and search inputs after an adaptation of `names`."""
        routed = self._routes_moved(config, names)
        return self.system.rerun_cost(routed, len(self.val) + min(self.settings.search_size, len(self.train)), config) if routed else 0.0

    def _note_pending_adaptation(self, config: SystemConfig, history: list[HistoryEntry]) -> None:
        """At a paper-mode loop's cap stop, the last accepted update's adaptation did not run: say so in the
        returned history (not the checkpoint: a resume with a raised cap runs it)."""
        stopped = getattr(self.ctx.caps, "stopped", None)
        if (self.adapt is None or self.settings.adaptation != "paper" or stopped is None or not history
                or not history[-1].accepted):
            return
        if self.adapt.stale(list(self.scheduler.components), accepted_versions(history), whole_system=True):
            history[-1].details["adaptation"] = {"note": f"skipped: the loop stopped at its cap ({stopped})"}

    def _observe(self, search: list[Trajectory], config: SystemConfig) -> None:
        if hasattr(self.lrf, "observe"):
            self.lrf.observe(search, config)

    def _adapt(self, config, names, n_inputs, history, val_trajs, val_scores, search, entry, vctx, sctx):
        """Stage 2 for `names` before this iteration's local search, under the gate like any other change.

        An adapted LRF changes what per-instance {"route": "lrf"} and "lrf_pre" choices pick, so the routes are
        re-validated: if the validation total drops, the previous reward model is restored (the
        routes then pick as before); otherwise the new routes stand and the search sample follows them.
        """
        routed = self._routes_moved(config, names)
        before = copy.deepcopy(self.lrf.state_dict()) if routed and hasattr(self.lrf, "state_dict") else None
        spent = self.ctx.ledger.equivalent_runs()
        self.adapt(config, self.ctx.replace(phase="adaptation"), names, n_inputs, accepted_versions(history))
        record = {"components": list(names), "fresh_inputs": n_inputs,
                  "runs": round(self.ctx.ledger.equivalent_runs() - spent, 2)}
        entry.details["adaptation"] = record
        if routed:
            with self.ctx.ledger.timed("validation"):
                trajs = self.system.run_changed(routed, val_trajs, config, vctx)
                adapted = self._validate(trajs)
            record["val_after_adaptation"] = sum(adapted)
            if sum(adapted) < sum(val_scores) and before is not None:
                self.lrf.load_state_dict(before)
                record["routes"] = "reverted: the adapted routes lowered validation"
                return val_trajs, val_scores, search
            record["routes"] = "kept"
            val_trajs, val_scores = trajs, adapted
            search = self.system.run_changed(routed, search, config, sctx)
            self._observe(search, config)
        if self.save_lrf is not None:
            self.save_lrf()
        return val_trajs, val_scores, search
