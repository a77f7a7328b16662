"""`lrf=oracle`: a perfect local reward function, the upper bracket of LRF quality (random_reward is the
lower one).

On a pipeline that carries an exact model of itself (`pipeline.local_reward_oracle`, which only the
synthetic benchmark has: optimas_pipelines/synthetic/exact.py), r_k(x, y) is the exact expected global reward
of component k's output y on input x, every other component under the loop's current configuration.
It plugs into Algorithm 1 where a trained LocalRewardModel does (`score(component, inputs, outputs)`,
`score_values(component, inputs, values)` for routes that pick before running, and per-input routes read
it through ctx.lrf); the loop learns the configuration from `observe`, as
the global-reward scorer does. There is nothing to collect, train or adapt, so Stage 1 and Stage 2
are skipped and cost nothing; the loop, its local optimizers and its gate are Optimas' own.

Its scores are expected rewards in [0, 1]; a global choice samples them as any LRF's (optim/choice.py: on
the scores' own spread, among values at least as good as the current one, unless
method.optimizer.choice.scale=absolute), so a perfect reward never proposes a worse value.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from optimas_cli.errors import UserError
from optimas_cli.system import Pipeline, SystemConfig, Trajectory

ORACLE = "oracle"


def is_oracle(lrf_cfg: Mapping) -> bool:
    return lrf_cfg.get("name") == ORACLE


def refuse_oracle(task: str, lrf_cfg: Mapping) -> None:
    """lrf=oracle is the exact local reward, not a learned one: Stage 1 (`optimas collect`, `optimas train-lrf`)
    has nothing to collect or train for it."""
    if is_oracle(lrf_cfg):
        raise UserError(f"optimas {task} has nothing to do with lrf=oracle: the exact local reward needs no "
                        "preference pairs and no training",
                        "run Optimas on it with `optimas run pipeline=synthetic lrf=oracle`, or collect for a "
                        "learned reward (lrf=minilm)")


class OracleLRF:
    def __init__(self, pipeline: Pipeline):
        exact = getattr(pipeline, "local_reward_oracle", None)
        if exact is None:
            raise UserError(f"lrf=oracle needs a pipeline with an exact model of its reward; {pipeline.name!r} has none",
                            "use it with pipeline=synthetic, or pick a trained local reward (e.g. lrf=minilm)")
        self.exact = exact
        self.config: Mapping = pipeline.system.default_config()

    def observe(self, trajectories: Sequence[Trajectory], config: SystemConfig) -> None:
        self.config = config

    def score(self, component_name: str, inputs: list[dict], outputs: list[dict]) -> list[float]:
        return self.exact.score(component_name, self.config, inputs, outputs)

    def scores_values(self, component_name: str) -> bool:
        return hasattr(self.exact, "score_values")

    def score_values(self, component_name: str, inputs: list[dict], values: list) -> list[list[float]]:
        """The exact expected reward of each value on each input (rows: inputs), before anything runs."""
        return self.exact.score_values(component_name, self.config, inputs, values)
