"""SysDPO-Sampling: joint DPO over a DAG of local models from final-output preferences.

Per training input, k candidates at each trainable node (diverse beam search by default, or
temperature sampling), each carried through the rest of the system; every pair of the input's
trajectories whose global rewards differ is a preference (ties skipped), and the trajectory-level
DPO loss, factorized over the nodes (optim/sysdpo.py), trains all nodes' adapters at once.
Reference: the adapter-free base model. Evaluation decodes greedily (the run's LM settings).
"""
from __future__ import annotations

from collections import defaultdict

from optimas_cli.errors import UserError
from optimas_cli.methods.base import Method, MethodOutcome
from optimas_cli.methods.joint_weights import JointSettings, node_segments, optimize_jointly, trainable_nodes
from optimas_cli.optim.rollouts import Branching, distinct_candidate_rates, sample_rollouts
from optimas_cli.optim.sysdpo import SysDPOTrainer, preference_pairs
from optimas_cli.system.budget import Budget


class SysDPO(Method):
    def __init__(self, budget: Budget, name: str = "sysdpo", console=None, seed: int = 0, sampling: str = "dbs", k: int = 2,
                 beta: float = 0.1, diversity_penalty: float = 20.0, temperature: float = 1.0, steps: int = 4,
                 batch_size: int = 4, learning_rate: float = 1e-4, lora: dict | None = None):
        if int(k) < 2:
            raise UserError(f"method.k={k}: with one candidate per node the node terms of SysDPO cancel",
                            "use method.k=2 or more")
        super().__init__(name, budget, console)
        self.seed = int(seed)
        self.branching = Branching(int(k), sampling, float(temperature), float(diversity_penalty))
        self.beta, self.steps, self.batch_size = float(beta), int(steps), int(batch_size)
        self.learning_rate, self.lora = float(learning_rate), dict(lora or {})

    def optimize(self, pipeline, splits, ctx, folder) -> MethodOutcome:
        nodes = trainable_nodes(pipeline, self.name)

        def sample(config, examples, octx, iteration):
            # DBS is deterministic; temperature sampling draws fresh candidates each iteration.
            return sample_rollouts(pipeline.system, examples, config, octx, nodes, self.branching,
                                   sample_index=iteration)

        def update(policies, rollouts, scores, iteration):
            by_input = defaultdict(list)
            for rollout, score in zip(rollouts, scores, strict=True):
                by_input[rollout.source].append((node_segments(policies, rollout), score))
            pairs = [pair for group in by_input.values()
                     for pair in preference_pairs([t for t, _ in group], [s for _, s in group])]
            if not pairs:
                return {"updated": False, "pairs": 0, "note": "every trajectory of every input tied"}
            trainer = SysDPOTrainer(policies, pairs, self.beta, self.learning_rate)
            return {"updated": True, **trainer.train(self.steps, self.batch_size, seed=self.seed + iteration)}

        settings = JointSettings(self.budget.iterations, self.budget.search_size, self.lora)
        outcome = optimize_jointly(pipeline, splits, ctx, folder, settings, self.name, sample, update, self.console)
        outcome.extras[self.name].update(sampling=self.branching.sampling, k=self.branching.k, beta=self.beta,
                                         diversity_penalty=self.branching.diversity_penalty,
                                         distinct_candidate_rate=distinct_candidate_rates(ctx.ledger))
        return outcome
