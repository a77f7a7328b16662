"""Pass rate: the task's real unit tests (`test` field) against the final code, in the sandbox.

1.0 when every test passes, else 0.0 (a timeout, a crash or code that does not load included).
Scored in parallel sandboxes through Metric.many; identical code is not run twice (OutcomeCache).
"""
from __future__ import annotations

from collections.abc import Sequence

from optimas_cli.sandbox import SandboxLimits
from optimas_cli.system.pipeline import Metric
from pipelines.bigcodebench.execution import OutcomeCache, run_suites


class PassRate:
    def __init__(self, limits: SandboxLimits, workers: int | None = None, cache: OutcomeCache | None = None):
        self.limits, self.workers = limits, workers
        self.cache = cache if cache is not None else OutcomeCache()

    def many(self, examples: Sequence[dict], outputs: Sequence[dict]) -> list[float]:
        scores = [0.0] * len(examples)
        todo = [i for i, out in enumerate(outputs) if (out.get("code") or "").strip()]
        pairs = [(outputs[i]["code"], examples[i]["test"]) for i in todo]
        for i, outcome in zip(todo, run_suites(pairs, self.limits, self.workers, self.cache), strict=True):
            scores[i] = 1.0 if outcome.passed else 0.0
        return scores

    def one(self, example: dict, output: dict) -> float:
        return self.many([example], [output])[0]


def pass_rate_metric(limits: SandboxLimits, workers: int | None = None) -> Metric:
    scorer = PassRate(limits, workers)
    return Metric("pass_rate", scorer.one, batch_fn=scorer.many)
