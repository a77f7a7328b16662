"""Optimas: collect preference pairs, train the local reward functions, run Algorithm 1."""
from __future__ import annotations

import logging
from collections.abc import Mapping

from rich.console import Console

from optimas_cli.errors import UserError
from optimas_cli.lrf.collect import optimizable_components
from optimas_cli.lrf.oracle import OracleLRF, is_oracle
from optimas_cli.lrf.stage import (
    LRF_DIR,
    Stage2,
    collect_initial_pairs,
    make_buffer,
    no_pairs_report,
    train_initial_lrf,
)
from optimas_cli.methods.base import Method, MethodOutcome
from optimas_cli.optim.loop import LoopSettings, OptimasLoop
from optimas_cli.optim.prompt import loop_proposer
from optimas_cli.system.budget import Budget

log = logging.getLogger("optimas")
STAGE2_POOLS = ("train", "beyond_train")


class Optimas(Method):
    """`adaptation` is when Stage 2 adapts the local rewards (optim/loop.ADAPTATION_MODES): `lazy` refreshes a
    component's r_k just before it is next optimized, when an accepted update upstream or downstream of it came
    after its pairs; `paper` adapts every r_k after every accepted update; `none` is the optimas_no_adapt ablation.

    `skip_unpaired=True` schedules only components whose LRF has training pairs (the paper draws
    uniformly over all of them: the default). `stage2_pool` is where Stage 2's fresh inputs come
    from: the budget's training split (default, so a run never reads more training data than its
    budget says) or the loader's training rows beyond it.
    """

    def __init__(self, budget: Budget, lrf: Mapping, name: str = "optimas", console: Console | None = None,
                 scheduler: str = "uniform", adaptation: str = "lazy", optimizer: Mapping | None = None, seed: int = 0,
                 skip_unpaired: bool = False, stage2_pool: str = "train", gate: str = "strict",
                 gate_alpha: float = 0.1, optimizer_lm: str | None = None):
        super().__init__(name, budget, console)
        if stage2_pool not in STAGE2_POOLS:
            raise UserError(f"unknown method.stage2_pool {stage2_pool!r}", f"use one of {', '.join(STAGE2_POOLS)}")
        self.lrf_cfg, self.skip_unpaired, self.stage2_pool = dict(lrf), skip_unpaired, stage2_pool
        self.optimizer_lm = optimizer_lm  # the prompt proposer's model (None: the run's LM)
        self.scheduler, self.adaptation, self.optimizer, self.seed = scheduler, adaptation, dict(optimizer or {}), seed
        self.gate, self.gate_alpha = gate, gate_alpha

    def optimize(self, pipeline, splits, ctx, folder) -> MethodOutcome:
        system, console = pipeline.system, self.console
        settings = LoopSettings.from_budget(self.budget, self.scheduler, self.optimizer, self.seed,
                                            str(folder.file("adapters")), self.gate, self.gate_alpha, self.optimizer_lm,
                                            self.adaptation)
        # (checked before anything is spent: a mistyped optimizer key or gate fails here)
        if is_oracle(self.lrf_cfg):
            return self._with_oracle(pipeline, splits, ctx, folder, settings)
        console.print("[bold]stage 1[/] · collecting preference pairs")
        pairs = collect_initial_pairs(pipeline, system.default_config(), splits.train, ctx, folder, self.lrf_cfg, console)
        if not pairs:
            return self._unchanged(system, folder)
        buffer = make_buffer(self.lrf_cfg, self.seed)
        console.print(f"[bold]stage 1[/] · training local rewards on {len(pairs)} pairs")
        lrf, report = train_initial_lrf(pipeline, pairs, ctx, folder, self.lrf_cfg, buffer)
        console.print(
            f"  alignment ({report['measured_on']} pairs): LRF {_pct(report['mean_pairwise_accuracy'])}"
            f" · LLM judge {_pct(report['mean_judge_accuracy'])}"
        )
        adapt = Stage2(pipeline, lrf, buffer, self.lrf_cfg, self._fresh_pool(pipeline, splits), self.budget.fresh_size,
                       folder)

        loop = OptimasLoop(
            pipeline, splits.train, splits.val, ctx, lrf, settings, folder,
            adapt=adapt,  # settings.adaptation=none leaves it unused
            save_lrf=lambda: lrf.save(folder.file(LRF_DIR)),
            on_iteration=self.print_iteration,
            # A component without training pairs has an untrained r_k: optimizing against it is noise.
            schedulable=buffer.components if self.skip_unpaired else None,
            carry=adapt,
        )
        unpaired = [n for n in optimizable_components(system) if n not in buffer.components()]
        if unpaired:
            what = "skipped until Stage 2 finds some" if self.skip_unpaired else "their r_k is untrained"
            console.print(f"  no training pairs for {', '.join(unpaired)}: {what}")
        console.print(f"[bold]Algorithm 1[/] · {settings.length(ctx.caps)}, scheduler {self.scheduler}")
        config, history = loop.run_within_caps()
        return MethodOutcome(config=config, lrf=lrf, history=history,
                             extras={"lrf": report, "adaptations": adapt.adaptations})

    def _with_oracle(self, pipeline, splits, ctx, folder, settings) -> MethodOutcome:
        """lrf=oracle (lrf/oracle.py): the same loop on the pipeline's exact local reward; no Stage 1 or 2."""
        lrf = OracleLRF(pipeline)
        loop = OptimasLoop(pipeline, splits.train, splits.val, ctx, lrf, settings, folder,
                           on_iteration=self.print_iteration)
        self.console.print(f"[bold]Algorithm 1[/] · exact local rewards · {settings.length(ctx.caps)}, "
                           f"scheduler {self.scheduler}")
        config, history = loop.run_within_caps()
        return MethodOutcome(config=config, lrf=lrf, history=history,
                             extras={"lrf_oracle": "exact expected reward of each output (no pairs, no training)",
                                     "adaptations": []})

    def prompt_proposer(self, pipeline, ctx):
        return loop_proposer(pipeline, self.optimizer, self.optimizer_lm, ctx)

    def _unchanged(self, system, folder) -> MethodOutcome:
        """No pair at all: every candidate of every component earned the same global reward on the
        training inputs. There is no local reward to learn, so the run ends with the system as it was
        (and is still evaluated, so Table 2 shows what the method did: nothing, at its cost)."""
        note = ("stage 1 collected no preference pairs (each component's candidates tied under the global "
                "reward on every training input): no local reward to learn, the system is left unchanged; "
                "more training inputs (budget.train_size) or candidates (lrf.collect.num_candidates) may find some")
        self.console.print(f"[yellow]{note}[/]")
        log.warning(note)
        return MethodOutcome(config=system.default_config(),
                             extras={"lrf": no_pairs_report(folder), "adaptations": [], "no_pairs": note})

    def _fresh_pool(self, pipeline, splits) -> list[dict]:
        if self.stage2_pool == "beyond_train":
            return list(pipeline.splits.train[len(splits.train):]) or list(splits.train)
        return list(splits.train)


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"
