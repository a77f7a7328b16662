"""REINFORCE baseline: policy gradient on the trainable components' LoRA weights, global reward only.

Per iteration, `rollouts` full-system rollouts per training input, every trainable node sampled at
`temperature`; the reward of a rollout is the global metric of its final output, the baseline the
mean reward of the batch (shared by all rollouts), and one gradient step (optim/reinforce.py)
updates all nodes' adapters together. No local reward function, no preference pairs.
"""
from __future__ import annotations

from optimas_cli.methods.base import Method, MethodOutcome
from optimas_cli.methods.cost import Conditions, Estimate, full_runs
from optimas_cli.methods.joint_weights import (
    JointSettings,
    joint_estimate,
    node_segments,
    optimize_jointly,
    trainable_nodes,
)
from optimas_cli.optim.reinforce import reinforce_step
from optimas_cli.optim.rollouts import Branching, sample_rollouts
from optimas_cli.system import ConfigKind
from optimas_cli.system.budget import Budget


class Reinforce(Method):
    optimizes = frozenset({ConfigKind.WEIGHTS})

    def __init__(self, budget: Budget, name: str = "reinforce", console=None, seed: int = 0, rollouts: int = 4,
                 temperature: float = 1.0, learning_rate: float = 1e-4, lora: dict | None = None):
        super().__init__(name, budget, console)
        self.seed = int(seed)
        self.rollouts, self.learning_rate, self.lora = int(rollouts), float(learning_rate), dict(lora or {})
        self.branching = Branching(k=1, sampling="temperature", temperature=float(temperature))

    def estimate(self, pipeline, splits, conditions: Conditions) -> Estimate:
        """`rollouts` whole-system rollouts per training input, every trainable node's completion trained on."""
        nodes = len(self.targets(pipeline))
        return joint_estimate(pipeline, splits, self.budget,
                              lambda phase, inputs: full_runs(pipeline.system, inputs * self.rollouts, phase),
                              self.rollouts * min(self.budget.search_size, len(splits.train)) * nodes)

    def optimize(self, pipeline, splits, ctx, folder) -> MethodOutcome:
        self.fit(pipeline)
        nodes = trainable_nodes(pipeline, self.name)

        def sample(config, examples, octx, iteration):
            return sample_rollouts(pipeline.system, examples, config, octx, nodes, self.branching,
                                   rollouts=self.rollouts, sample_index=iteration * self.rollouts)

        def update(policies, rollouts, scores, iteration):
            details = reinforce_step(policies, policies.optimizer, [node_segments(policies, r) for r in rollouts], scores)
            return {"updated": details["loss"] is not None, **details}

        settings = JointSettings.from_budget(self.budget, self.lora, self.learning_rate)
        outcome = optimize_jointly(pipeline, splits, ctx, folder, settings, self.name, sample, update, self.console)
        outcome.extras[self.name].update(rollouts=self.rollouts, temperature=self.branching.temperature)
        return outcome
