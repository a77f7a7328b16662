"""The interface every method (optimas and the baselines) implements, so comparisons are side by side."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from optimas_cli.system import Pipeline, RunContext, Splits, SystemConfig
from optimas_cli.system.evaluate import evaluate


@dataclass
class MethodOutcome:
    """What a method hands back: the configuration to evaluate, plus what it learned on the way."""

    config: SystemConfig
    lrf: Any = None  # a LocalRewardModel, when per-instance choices route by it at inference
    history: list[dict] = field(default_factory=list)  # one entry per iteration
    extras: dict = field(default_factory=dict)  # method-specific results for results.json


class Method:
    """`optimize` may use train and validation splits only; the runner evaluates on test."""

    name = "method"

    def optimize(self, pipeline: Pipeline, splits: Splits, ctx: RunContext, folder) -> MethodOutcome:
        raise NotImplementedError

    def evaluate(
        self, pipeline: Pipeline, outcome: MethodOutcome, examples: list[dict], ctx: RunContext, repeats: int
    ) -> dict:
        return evaluate(pipeline, outcome.config, examples, ctx.replace(lrf=outcome.lrf), repeats)
