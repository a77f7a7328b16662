"""Optimas: collect preference pairs, train the local reward functions, run Algorithm 1."""
from __future__ import annotations

import logging
from collections.abc import Mapping

from rich.console import Console

from optimas_cli.lrf.collect import collect_all, optimizable_components
from optimas_cli.lrf.stage import (
    LRF_DIR,
    collect_initial_pairs,
    collect_settings,
    make_buffer,
    train_config,
    train_initial_lrf,
)
from optimas_cli.lrf.train import adapt_stage2
from optimas_cli.methods.base import Method, MethodOutcome
from optimas_cli.optim.loop import LoopSettings, OptimasLoop
from optimas_cli.system.run_folder import RunFolder

log = logging.getLogger("optimas")
console = Console(highlight=False, soft_wrap=True)


class Optimas(Method):
    """`adapt=False` is the optimas_no_adapt ablation (no Stage 2 after an accepted update)."""

    def __init__(self, name: str = "optimas", lrf: Mapping | None = None, budget: Mapping | None = None,
                 scheduler: str = "uniform", adapt: bool = True, optimizer: Mapping | None = None, seed: int = 0,
                 skip_unpaired: bool = True, optimizer_lm: str | None = None):
        self.name, self.lrf_cfg, self.budget = name, dict(lrf or {}), dict(budget or {})
        self.skip_unpaired, self.optimizer_lm = skip_unpaired, optimizer_lm  # optimizer_lm: the prompt proposer's model
        self.scheduler, self.adapt_enabled, self.optimizer, self.seed = scheduler, adapt, dict(optimizer or {}), seed

    def optimize(self, pipeline, splits, ctx, folder) -> MethodOutcome:
        system = pipeline.system
        console.print("[bold]stage 1[/] · collecting preference pairs")
        pairs = collect_initial_pairs(pipeline, system.default_config(), splits.train, ctx, folder, self.lrf_cfg, console)
        buffer = make_buffer(self.lrf_cfg, self.seed)
        console.print(f"[bold]stage 1[/] · training local rewards on {len(pairs)} pairs")
        lrf, report = train_initial_lrf(pipeline, pairs, ctx, folder, self.lrf_cfg, buffer)
        console.print(
            f"  alignment ({report['measured_on']} pairs): LRF {_pct(report['mean_pairwise_accuracy'])}"
            f" · LLM judge {_pct(report['mean_judge_accuracy'])}"
        )
        fresh_pool = pipeline.splits.train[len(splits.train):] or list(splits.train)
        adaptations: list[dict] = []

        def adapt(config, actx):
            """Stage 2: fresh pairs under the accepted configuration, mixed with the replay buffer."""
            start = (len(adaptations) * int(self.budget.get("fresh_size", 20))) % len(fresh_pool)
            fresh_inputs = (fresh_pool[start:] + fresh_pool[:start])[: int(self.budget.get("fresh_size", 20))]
            with actx.ledger.timed("adaptation"):
                fresh = collect_all(system, config, fresh_inputs, actx.replace(lrf=lrf), pipeline.metric,
                                    **collect_settings(self.lrf_cfg))
                flat = [p for ps in fresh.values() for p in ps]
                adaptations.append(adapt_stage2(lrf, flat, buffer, train_config(self.lrf_cfg, len(flat))))

        settings = LoopSettings(
            iterations=int(self.budget.get("iterations", 10)),
            search_size=int(self.budget.get("search_size", 50)),
            scheduler=self.scheduler,
            optimizer=self._optimizer_settings(folder),
            seed=self.seed,
        )
        loop = OptimasLoop(
            pipeline, splits.train, splits.val, ctx, lrf, settings, folder,
            adapt=adapt if self.adapt_enabled else None,
            save_lrf=lambda: lrf.save(folder.file(LRF_DIR)),
            on_iteration=_report_iteration,
            # A component without training pairs has an untrained r_k: optimizing against it is noise.
            schedulable=buffer.components if self.skip_unpaired else None,
        )
        unpaired = [n for n in optimizable_components(system) if n not in buffer.components()]
        if unpaired and self.skip_unpaired:
            console.print(f"  no training pairs for {', '.join(unpaired)}: skipped until Stage 2 finds some")
        console.print(f"[bold]Algorithm 1[/] · {settings.iterations} iterations, scheduler {self.scheduler}")
        config, history = loop.run()
        return MethodOutcome(config=config, lrf=lrf, history=history,
                             extras={"lrf": report, "adaptations": adaptations})

    def _optimizer_settings(self, folder: RunFolder) -> dict:
        """Budget sizes flow into the per-kind optimizer settings (Table 7: 3 candidates x 3 steps)."""
        opt = {k: dict(v) for k, v in self.optimizer.items()}
        prompt = opt.setdefault("prompt", {})
        prompt.setdefault("num_candidates", int(self.budget.get("num_candidates", 3)))
        prompt.setdefault("num_steps", int(self.budget.get("num_steps", 3)))
        if self.optimizer_lm:
            prompt.setdefault("lm", self.optimizer_lm)
        opt.setdefault("weights", {}).setdefault("work_dir", str(folder.file("adapters")))
        for section in opt.values():
            section.setdefault("seed", self.seed)
        return opt


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _report_iteration(entry: dict, runs: float) -> None:
    verdict = "[green]accepted[/]" if entry["accepted"] else "[dim]rejected[/]"
    console.print(
        f"  iter {entry['iteration']:>3} · {entry['component']:<22} · val {entry['val_before']:.3f}"
        f" → {entry.get('val_candidate', entry['val_before']):.3f} {verdict} · runs {runs:.1f}"
    )
