"""Algorithm 1: pick a component, optimize it locally against r_k, gate on validation, adapt the LRFs.

Reads top to bottom as the paper's loop. Every iteration is checkpointed (configuration, validation
total, history, random state) so a killed run resumes at the next iteration with the same history.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np

from optimas_cli.optim import optimize_component
from optimas_cli.optim.scheduler import ComponentScheduler
from optimas_cli.system import Pipeline, RunContext, SystemConfig, Trajectory
from optimas_cli.system.caps import cap_reached
from optimas_cli.system.evaluate import rewards
from optimas_cli.system.run_folder import RunFolder, uncounted

log = logging.getLogger("optimas")
STATE_FILE = "loop_state.json"


@dataclass
class LoopSettings:
    iterations: int
    search_size: int
    scheduler: str = "uniform"
    optimizer: dict | None = None  # per-kind settings handed to the local optimizers
    seed: int = 0


class OptimasLoop:
    """`lrf` scores a component's outputs: `lrf.score(name, inputs, outputs) -> list[float]` (a trained
    LocalRewardModel, or a baseline's scorer). A scorer that needs the current search trajectories
    (e.g. the global-reward ablation, which runs the rest of the system) may define
    `observe(trajectories, config)`; the loop calls it whenever they change.
    `adapt(config, ctx)` is Stage 2 (fresh pairs + replay); None disables it (optimas_no_adapt).
    `on_iteration(entry, runs)` reports progress; `save_lrf()` checkpoints the adapted LRF.
    `schedulable()` names the components the scheduler may pick now (None: all of them).
    `carry` is method state to checkpoint with each iteration: `state() -> dict`, `restore(dict)`.
    """

    def __init__(
        self,
        pipeline: Pipeline,
        train: Sequence[dict],
        val: Sequence[dict],
        ctx: RunContext,
        lrf: Any,
        settings: LoopSettings,
        folder: RunFolder,
        adapt: Callable[[SystemConfig, RunContext], None] | None = None,
        save_lrf: Callable[[], None] | None = None,
        on_iteration: Callable[[dict, float], None] | None = None,
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

    # -- state ----------------------------------------------------------------------------------
    def _load_or_start(self) -> tuple[int, SystemConfig, list[dict], np.random.Generator]:
        rng = np.random.default_rng(self.settings.seed)
        state = self.folder.read_json(STATE_FILE)
        if state is None:
            return 0, self.system.default_config(), [], rng
        rng.bit_generator.state = state["rng"]
        if self.carry is not None:
            self.carry.restore(state["carry"])
        log.info("resuming Algorithm 1 after iteration %d", state["iteration"])
        return state["iteration"], SystemConfig(state["config"]), state["history"], rng

    def _checkpoint(self, done: int, config: SystemConfig, history: list[dict], rng: np.random.Generator) -> None:
        # Accounts first: a kill before the state write redoes the iteration, counted once (see RunFolder).
        self.folder.save_accounts(self.ctx)
        config.save(self.folder.file("best_config.json"))
        self.folder.write_json(
            STATE_FILE,
            {"iteration": done, "config": config.to_dict(), "history": history, "rng": rng.bit_generator.state,
             "carry": None if self.carry is None else self.carry.state()},
        )

    def _validate(self, trajs: list[Trajectory]) -> float:
        return float(sum(rewards(self.pipeline, trajs)))

    # -- the loop -------------------------------------------------------------------------------
    def run(self) -> tuple[SystemConfig, list[dict]]:
        resumed = self.folder.file(STATE_FILE).exists()
        start, config, history, rng = self._load_or_start()
        vctx = self.ctx.replace(phase="validation", lrf=self.lrf)
        octx = self.ctx.replace(phase="local_optimization", lrf=self.lrf)
        # Cached trajectories: validation re-runs only the changed component and what follows it;
        # the search sample's cached inputs feed the local optimizers. A resumed run rebuilds them
        # uncounted: the checkpoint's accounts already hold them.
        with uncounted(self.ctx) if resumed else nullcontext():
            with self.ctx.ledger.timed("validation"):
                val_trajs = self.system.run(self.val, config, vctx)
                val_total = self._validate(val_trajs)
            with self.ctx.ledger.timed("local_optimization"):
                search = self.system.run(self.train[: self.settings.search_size], config, octx)
        self._observe(search, config)
        if start == 0:
            self._checkpoint(0, config, history, rng)

        for t in range(start, self.settings.iterations):
            if cap_reached(self.ctx):  # a safe point: everything up to here is checkpointed
                break
            name = self.scheduler.pick(t, history, rng, self.schedulable() if self.schedulable else None)
            component = self.system.components[name]
            search_inputs = [tr.steps[name]["inputs"] for tr in search if not tr.steps[name]["skipped"]]
            with self.ctx.ledger.timed("local_optimization"):
                proposal = optimize_component(
                    component, config[name], search_inputs, self.lrf, octx, self.settings.optimizer, rng=rng
                )
            entry = {
                "iteration": t + 1,
                "component": name,
                "kind": component.kind.value,
                "proposal": proposal.value,
                "local_score": proposal.local_score,
                "baseline_local_score": proposal.baseline_score,
                "val_before": val_total,
                "val_after": val_total,
                "accepted": False,
            }
            if proposal.value != config[name]:
                candidate = config.replace(name, proposal.value)
                with self.ctx.ledger.timed("validation"):
                    cand_trajs = self.system.run_from(name, val_trajs, candidate, vctx)
                    cand_total = self._validate(cand_trajs)
                entry["val_candidate"] = cand_total
                if cand_total > val_total:  # strictly higher: ties and losses are rejected
                    config, val_trajs, val_total = candidate, cand_trajs, cand_total
                    search = self.system.run_from(name, search, config, octx)
                    self._observe(search, config)
                    entry.update(accepted=True, val_after=cand_total)
                    if self.adapt is not None:
                        self.adapt(config, self.ctx.replace(phase="adaptation"))
                        if self.save_lrf is not None:
                            self.save_lrf()
                        val_total = self._refresh_routes(config, val_trajs, vctx, entry, val_total)
            else:
                entry["note"] = "the local optimizer kept the current value"
            entry["runs_so_far"] = round(self.ctx.ledger.equivalent_runs(), 2)  # x axis of a validation curve by cost
            history.append(entry)
            self._checkpoint(t + 1, config, history, rng)
            if self.on_iteration is not None:
                self.on_iteration(entry, entry["runs_so_far"])
            log.info("iteration %d: %s %s (val %.4f -> %.4f)", t + 1, name,
                     "accepted" if entry["accepted"] else "rejected", entry["val_before"], entry["val_after"])
        return config, history

    def _observe(self, search: list[Trajectory], config: SystemConfig) -> None:
        if hasattr(self.lrf, "observe"):
            self.lrf.observe(search, config)

    def _refresh_routes(self, config, val_trajs, vctx, entry, val_total) -> float:
        """An adapted LRF changes what per-instance {"route": "lrf"} choices pick: re-measure them."""
        routed = [n for n in self.system.order if isinstance(config[n], dict) and config[n].get("route") == "lrf"]
        if not routed:
            return val_total
        trajs = val_trajs
        for name in routed:
            trajs = self.system.run_from(name, trajs, config, vctx)
        val_trajs[:] = trajs
        entry["val_after_adaptation"] = self._validate(trajs)
        return entry["val_after_adaptation"]
