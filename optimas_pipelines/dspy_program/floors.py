"""Floors of a DSPy program (optimas_cli/report/floors.py), scored by the program's own metric on the run's test
examples: the training split's most frequent label (an example's fields other than its inputs, all at once) as
the prediction, and a no-LM rule: the program run with each predictor copying its inputs into its text outputs,
the code between predictors (a retriever, an `if`) running as it is. A metric that a copy of the program's own
inputs satisfies (the gold answer somewhere in the text) shows here. No chance level: outputs are open text.

The runs' config names the program (pipeline.program, as the run was given it), so the report imports it as the
run did: run `optimas report` from where the runs ran, or give the program as a .py path.
"""
from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from optimas_cli.report.floors import Floor, budget_cut, majority_floor
from optimas_cli.system import Component, CompoundSystem, ConfigKind, Pipeline, RunContext, RunLedger

SETTINGS = ("program", "trainset", "devset", "testset", "metric", "max_tokens")


def _settings(config: dict) -> str:
    pipeline = config.get("pipeline") or {}
    program = pipeline.get("program") or config.get("program")
    return json.dumps({**{k: pipeline[k] for k in SETTINGS if k in pipeline}, "program": program}, sort_keys=True)


@lru_cache(maxsize=8)
def _pipeline(settings: str) -> Pipeline:
    from optimas_pipelines.dspy_program import build  # refuses in one line without the baselines extra

    return build(**json.loads(settings))


def train_examples(config: dict) -> list[dict]:
    """The program's trainset, cut at the run's budget.train_size."""
    return budget_cut(_pipeline(_settings(config)).splits.train, config)


def floors(train: list[dict], test: list[dict], config: dict) -> list[Floor]:
    pipeline = _pipeline(_settings(config))
    found = [Floor("chance", "not defined: a program's outputs are open text, not a choice among a finite set", None)]
    if train:
        found.append(majority_label(pipeline, train, test))
    return [*found, copy_floor(pipeline, test)]


def _example(row: dict) -> dict:
    return {k: v for k, v in row.items() if k != "key"}


def _labels(pipeline: Pipeline, example: dict) -> dict:
    return {k: v for k, v in example.items() if k not in pipeline.system.inputs and k != "key"}


def majority_label(pipeline: Pipeline, train: list[dict], test: list[dict]) -> Floor:
    """The most frequent training label given as the program's prediction (its keys named like the label fields)."""
    fields = pipeline.metric.fn.keys  # system output field -> prediction key (ProgramMetric)

    def score(answer: str, example: dict) -> float:
        labels = json.loads(answer)
        return pipeline.metric(_example(example), {field: labels.get(key) for field, key in fields.items()})

    def shown(answer: str) -> str:
        labels = json.loads(answer)
        return ", ".join(f"{k}='{v}'" for k, v in labels.items())

    return majority_floor([json.dumps(_labels(pipeline, e), sort_keys=True) for e in train], test, score, shown)


class CopyInputs(Component):
    """A predictor answered without an LM: each text output field gets the predictor's inputs, joined as text
    (a list item per line); an output of another type its empty value (a Literal its first option), as in a
    dry run (replay.placeholder)."""

    def __init__(self, step: Component):
        super().__init__(step.name, f"copies its inputs: {step.description}", inputs=step.inputs, outputs=step.outputs,
                         kind=ConfigKind.NONE, when=step.when)
        self.annotations = {f"{step.name}__{f}": info.annotation
                            for f, info in step.predictor.signature.output_fields.items()}

    def forward(self, inputs: list[dict], value: Any, ctx: RunContext) -> list[dict]:
        from optimas_pipelines.dspy_program.replay import placeholder

        def text(x: dict) -> str:
            return "\n".join(str(item) for v in x.values() if v is not None
                             for item in (v if isinstance(v, list | tuple) else [v]))

        return [{f: text(x) if kind is str else placeholder(kind) for f, kind in self.annotations.items()}
                for x in inputs]


def copy_floor(pipeline: Pipeline, test: list[dict]) -> Floor:
    from optimas_pipelines.dspy_program.components import PredictorStep

    system = pipeline.system
    rule = CompoundSystem([CopyInputs(c) if isinstance(c, PredictorStep) else c for c in system.components.values()],
                          system.inputs, system.outputs)
    examples = [_example(e) for e in test]
    trajectories = rule.run(examples, rule.default_config(), RunContext(ledger=RunLedger(len(rule))))
    scores = {e["key"]: pipeline.metric(x, t.final(system.outputs))
              for e, x, t in zip(test, examples, trajectories, strict=True)}
    return Floor("copy inputs (no LM)", "the program with each predictor answering its own inputs, joined as text "
                 "(the code between predictors, e.g. a retriever, run as it is)", scores)
