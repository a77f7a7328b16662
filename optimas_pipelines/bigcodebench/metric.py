"""Pass rate: the task's real unit tests (`test` field) against the final code, in the sandbox.

1.0 when every test passes, else 0.0 (a timeout, a crash or code that does not load included).
Scored in parallel sandboxes through Metric.many; identical code is not run twice (OutcomeCache).
Each verdict is counted under the judge that gave it (judges.py) in `judges`, which the pipeline
puts in its info (results.json's pipeline_info.judges).
"""
from __future__ import annotations

from collections.abc import Sequence

from optimas_cli.sandbox import SandboxLimits
from optimas_cli.system.pipeline import Metric
from optimas_pipelines.bigcodebench.execution import OutcomeCache, run_suites
from optimas_pipelines.bigcodebench.judges import JUDGES


class PassRate:
    def __init__(self, limits: SandboxLimits, workers: int | None = None, cache: OutcomeCache | None = None,
                 judges: dict[str, int] | None = None):
        self.limits, self.workers = limits, workers
        self.cache = cache if cache is not None else OutcomeCache()
        self.judges = judges if judges is not None else {}
        for judge in JUDGES:
            self.judges.setdefault(judge, 0)

    def many(self, examples: Sequence[dict], outputs: Sequence[dict]) -> list[float]:
        scores = [0.0] * len(examples)
        todo = [i for i, out in enumerate(outputs) if (out.get("code") or "").strip()]
        pairs = [(outputs[i]["code"], examples[i]["test"]) for i in todo]
        for i, outcome in zip(todo, run_suites(pairs, self.limits, self.workers, self.cache), strict=True):
            scores[i] = 1.0 if outcome.passed else 0.0
            self.judges[outcome.judge] = self.judges.get(outcome.judge, 0) + 1
        return scores

    def one(self, example: dict, output: dict) -> float:
        return self.many([example], [output])[0]


def pass_rate_metric(limits: SandboxLimits, workers: int | None = None, judges: dict[str, int] | None = None) -> Metric:
    scorer = PassRate(limits, workers, judges=judges)
    return Metric("pass_rate", scorer.one, batch_fn=scorer.many)
