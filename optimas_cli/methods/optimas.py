"""Optimas: collect preference pairs, train the local reward functions, run Algorithm 1."""
from __future__ import annotations

import logging
from collections.abc import Mapping

from rich.console import Console

from optimas_cli.errors import UserError
from optimas_cli.lrf.collect import expected_collection, optimizable_components
from optimas_cli.lrf.oracle import OracleLRF, is_oracle
from optimas_cli.lrf.stage import (
    LRF_DIR,
    SIZE_FILE,
    Stage2,
    collect_initial_pairs,
    make_buffer,
    no_pairs_report,
    train_initial_lrf,
)
from optimas_cli.methods.base import EVERY_KIND, Method, MethodOutcome
from optimas_cli.methods.cost import (
    ALL_PAIRED,
    FIRST_ACCEPTED,
    LRF_STEP,
    Conditions,
    Estimate,
    lazy_adaptation,
    loop,
    loop_shape,
    rerun_counts,
    scaled,
    search_size,
    stage1,
)
from optimas_cli.optim.loop import LoopSettings, OptimasLoop
from optimas_cli.optim.prompt import loop_proposer
from optimas_cli.system import ConfigKind
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

    optimizes = EVERY_KIND

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
        extras = {"lrf": report, "adaptations": adapt.adaptations}
        if (size := folder.read_json(SIZE_FILE)) is not None:  # Stage 1 sized by the run cap (lrf/sizing.py)
            extras["stage1_size"] = size
        return MethodOutcome(config=config, lrf=lrf, history=history, extras=extras)

    def estimate(self, pipeline, splits, conditions: Conditions) -> Estimate:
        """Stage 1, then Algorithm 1 (methods/cost.loop) with Stage 2 as method.adaptation says: paper adapts every
        r_k after each accepted update (planned under FIRST_ACCEPTED); lazy refreshes the picked component's r_k when
        an accepted update in its context came after its pairs, which no plan can know either, so it is planned at
        the most lazy can spend (an upper bound, said so); none adapts nothing. lrf=oracle has no Stage 1 or 2."""
        system, budget, est = pipeline.system, self.budget, Estimate()
        est.assume(FIRST_ACCEPTED)
        if is_oracle(self.lrf_cfg):
            OracleLRF(pipeline)  # a pipeline without an exact model of itself is refused, as the run refuses it
            adaptation = "none"
        else:
            est.facts.update(stage1(system, len(splits.train), self.lrf_cfg, conditions.lm_temperature, est.phases,
                                    conditions.pair_share, max_runs=budget.max_runs))
            adaptation = self.adaptation
            est.assume(ALL_PAIRED)
        search, n_val, config = search_size(budget, splits), len(splits.val), system.default_config()
        fresh = min(int(budget.fresh_size), len(self._fresh_pool(pipeline, splits)))
        collect = self.lrf_cfg.get("collect") or {}

        def paper_stage2(name: str, weight: float, phases) -> None:
            """adaptation=paper: every r_k on fresh pairs after the acceptance; adapted routes re-validated."""
            scaled(lambda p: expected_collection(system, config, fresh, collect, p, conditions.lm_temperature), weight,
                   phases["adaptation"])
            comp = system.components[name]
            if comp.kind is ConfigKind.CHOICE and comp.per_instance:
                scaled(lambda p: rerun_counts(system, name, n_val, config, p), weight, phases["validation"])
                scaled(lambda p: rerun_counts(system, name, search, config, p), weight, phases["search_sample"])

        picks = self.targets(pipeline)
        shape = loop_shape(picks, self.scheduler, budget, self.optimizer)
        accepted = loop(system, splits, search, budget.iterations, shape, est.phases,
                        paper_stage2 if adaptation == "paper" else None, collected=not is_oracle(self.lrf_cfg))
        adaptations = accepted if adaptation == "paper" else 0.0
        if adaptation == "lazy":
            adaptations, bound = lazy_adaptation(pipeline, picks, budget.iterations, self.scheduler, fresh, collect,
                                                 conditions.lm_temperature, self.lrf_cfg.get("train_backbone") == "heads",
                                                 n_val, search, est.phases)
            if bound:
                est.facts["adaptation_bound"] = bound
        est.phases["adaptation"].work[LRF_STEP] += int((self.lrf_cfg.get("train") or {}).get("stage2_steps", 10)) * adaptations
        est.facts["accepted_updates"] = accepted
        return est

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
