"""SysDPO: joint DPO over a DAG of local models from final-output preferences (seed 003).

Per training input, k candidates at each trainable node (diverse beam search by default, or
temperature sampling), each carried through the rest of the system; the input's final outputs are
ranked by the global reward (ties skipped) and the DPO loss, factorized over the nodes
(optim/sysdpo.py), trains all nodes' adapters at once. `variant` picks how an output is scored:

- sampling (SysDPO-Sampling, the default): under the input's shared sampled intermediates,
  log sum_alpha p(y^alpha | x) p(z | x, y^alpha); the preferred and the rejected output see the same
  intermediates, so with one of them its terms would cancel.
- direct (SysDPO-Direct on self-generated data): each output by the trajectory that produced it.

One AdamW over the adapters is kept across iterations. Reference: the adapter-free base model.
Evaluation decodes greedily (the run's LM settings).
"""
from __future__ import annotations

import json
from collections import defaultdict

from optimas_cli.errors import UserError
from optimas_cli.methods.base import Method, MethodOutcome
from optimas_cli.methods.cost import Conditions, Estimate, PhaseCount
from optimas_cli.methods.joint_weights import (
    JointSettings,
    joint_estimate,
    node_segments,
    optimize_jointly,
    trainable_nodes,
)
from optimas_cli.optim.rollouts import Branching, distinct_candidate_rates, sample_rollouts
from optimas_cli.optim.sysdpo import SysDPOTrainer, direct_pairs, sampling_pairs
from optimas_cli.system import CompoundSystem, ConfigKind
from optimas_cli.system.budget import Budget

VARIANTS = ("sampling", "direct")


def final_output_node(system: CompoundSystem, trainable: list[str]) -> str | None:
    """The trainable node whose completion is the system's final output; None when a fixed
    component (e.g. Amazon's decider) writes it."""
    writer = [n for n in system.order if set(system.components[n].outputs) & set(system.outputs)][-1]
    return writer if writer in trainable else None


class SysDPO(Method):
    optimizes = frozenset({ConfigKind.WEIGHTS})

    def __init__(self, budget: Budget, name: str = "sysdpo", console=None, seed: int = 0, variant: str = "sampling",
                 sampling: str = "dbs", k: int = 2, beta: float = 0.1, diversity_penalty: float = 20.0,
                 temperature: float = 1.0, steps: int = 4, batch_size: int = 4, learning_rate: float = 1e-4,
                 lora: dict | None = None):
        if variant not in VARIANTS:
            raise UserError(f"unknown method.variant={variant!r}", f"use one of {', '.join(VARIANTS)}")
        if int(k) < 2:
            raise UserError(
                f"method.k={k}: with one candidate per node every input has a single final output, so there is no "
                "preference pair; and with one sampled intermediate its terms p(y | Pa(y)) would cancel between the "
                "preferred and the rejected output (seed 003), so only the final node could learn",
                "use method.k=2 or more")
        super().__init__(name, budget, console)
        self.seed, self.variant = int(seed), variant
        self.branching = Branching(int(k), sampling, float(temperature), float(diversity_penalty))
        self.beta, self.steps, self.batch_size = float(beta), int(steps), int(batch_size)
        self.learning_rate, self.lora = float(learning_rate), dict(lora or {})

    def estimate(self, pipeline, splits, conditions: Conditions) -> Estimate:
        """k candidates at each trainable node per partial trajectory, each carried through the rest of the
        system; `steps` DPO steps of `batch_size` pairs per iteration."""
        system, k = pipeline.system, self.branching.k

        def rollouts(phase: PhaseCount, inputs: int) -> None:
            branches = 1
            for name in system.order:
                comp = system.components[name]
                if comp.kind is ConfigKind.WEIGHTS:
                    branches *= k
                phase.run(comp, inputs * branches)

        return joint_estimate(pipeline, splits, self.budget, rollouts, self.steps * self.batch_size)

    def optimize(self, pipeline, splits, ctx, folder) -> MethodOutcome:
        system = pipeline.system
        self.fit(pipeline)
        nodes = trainable_nodes(pipeline, self.name)
        final = final_output_node(system, nodes)

        def sample(config, examples, octx, iteration):
            # DBS is deterministic; temperature sampling draws fresh candidates each iteration.
            return sample_rollouts(system, examples, config, octx, nodes, self.branching, sample_index=iteration)

        def pairs_of(group) -> list:
            trajectories, scores = [t for t, _, _ in group], [s for _, s, _ in group]
            if self.variant == "direct":
                return direct_pairs(trajectories, scores)
            return sampling_pairs(trajectories, scores, final, [z for _, _, z in group])

        def update(policies, rollouts, scores, iteration):
            by_input = defaultdict(list)
            for rollout, score in zip(rollouts, scores, strict=True):
                output = json.dumps(rollout.trajectory.final(system.outputs), sort_keys=True, default=str)
                by_input[rollout.source].append((node_segments(policies, rollout), score, output))
            pairs = [pair for group in by_input.values() for pair in pairs_of(group)]
            if not pairs:
                return {"updated": False, "pairs": 0, "note": "every final output of every input tied"}
            trainer = SysDPOTrainer(policies, pairs, self.beta, policies.optimizer)
            return {"updated": True, **trainer.train(self.steps, self.batch_size, seed=self.seed + iteration)}

        settings = JointSettings.from_budget(self.budget, self.lora, self.learning_rate)
        outcome = optimize_jointly(pipeline, splits, ctx, folder, settings, self.name, sample, update, self.console)
        outcome.extras[self.name].update(variant=self.variant, final_output_node=final,
                                         sampling=self.branching.sampling, k=self.branching.k, beta=self.beta,
                                         diversity_penalty=self.branching.diversity_penalty,
                                         distinct_candidate_rate=distinct_candidate_rates(ctx.ledger))
        return outcome
