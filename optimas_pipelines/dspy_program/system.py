"""A DSPy program as a Pipeline: its predictors and code as components (components.py), wired in the order a
dry run of the program on training examples calls them; its data sets as splits; its metric as the global
reward; and `to_program`, the program with an optimized configuration's instructions written back."""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import dspy

from optimas_cli.errors import UserError
from optimas_cli.system import CompoundSystem, Metric, Pipeline, Splits, SystemConfig
from optimas_pipelines.dspy_program.components import PredictorInputs, PredictorStep, ProgramOutput
from optimas_pipelines.dspy_program.program import component_names, examples, load_program, resolve
from optimas_pipelines.dspy_program.replay import Replay, Unsupported

log = logging.getLogger("optimas")
TRACED_EXAMPLES = 20  # training examples the wiring is read from (dry runs: no LM call, the code alone)
SPLITS = ("trainset", "devset", "testset")


def call_order(declared: Sequence[str], runs: list[list[str]], spec: str) -> list[str]:
    """One order of the predictors consistent with every traced run; a predictor no run called takes its place
    by declaration (a branch the dry runs never took)."""
    before = {name: set() for name in declared}
    for calls in runs:
        for i, name in enumerate(calls):
            before[name].update(calls[:i])
    order: list[str] = []
    while len(order) < len(declared):
        ready = [n for n in declared if n not in order and before[n] <= set(order)]
        if not ready:
            seen = sorted({" -> ".join(c) for c in runs})
            raise UserError(f"program {spec} calls its predictors in different orders on different training examples "
                            f"({' / '.join(seen)})", "call them in one order: each predictor is wired to every "
                            "predictor called before it")
        order.append(ready[0])
    return order


def trace(replay: Replay, declared: Sequence[str], train: Sequence[dspy.Example], spec: str) -> tuple[list[str], list]:
    """The predictors' call order and the prediction's keys, from dry runs of the program on training examples."""
    runs, keys, failures = [], [], []
    for example in train[:TRACED_EXAMPLES]:
        try:
            outcome = replay.dry_run(example.inputs().toDict())
        except Unsupported:
            raise
        except Exception as exc:  # the code did not accept a placeholder output: this example tells nothing
            failures.append(exc)
            continue
        runs.append(outcome.calls)
        for key in prediction_keys(outcome.prediction, spec):
            if key not in keys:
                keys.append(key)
    if not runs:
        exc = failures[0]
        raise UserError(f"program {spec} raised {type(exc).__name__}: {exc} on a dry run of each of "
                        f"{len(failures)} training examples", "make its code accept any value of its predictors' output "
                        "types (the dry run answers '' for text, 0 for numbers, the first option of a Literal)")
    return call_order(declared, runs, spec), keys


def prediction_keys(prediction: Any, spec: str) -> list[str]:
    if isinstance(prediction, dspy.Prediction | dspy.Example | dict):
        return list(prediction.keys())
    raise UserError(f"program {spec} returns a {type(prediction).__name__}, not a dspy.Prediction",
                    "return dspy.Prediction(answer=...) from its forward")


class ProgramMetric:
    """The user's metric(example, prediction) on the system's final outputs, as dspy.Evaluate calls it: an
    exception scores 0 (logged once per kind)."""

    def __init__(self, fn: Callable, inputs: Sequence[str], keys: dict[str, str]):
        self.fn, self.inputs, self.keys = fn, tuple(inputs), dict(keys)
        self._warned: set[str] = set()

    def __call__(self, example: dict, output: dict) -> float:
        prediction = dspy.Prediction(**{key: output.get(field) for field, key in self.keys.items()})
        try:
            return float(self.fn(dspy.Example(**example).with_inputs(*self.inputs), prediction))
        except Exception as exc:
            where = f"{type(exc).__name__}: {exc}"[:300]
            if where not in self._warned:
                self._warned.add(where)
                log.warning("the DSPy program's metric raised %s; that example scores 0", where)
            return 0.0


def build_program_pipeline(program: str | None, trainset: str, devset: str, testset: str, metric: str,
                           max_tokens: int) -> Pipeline:
    user_program, home = load_program(program)
    names = component_names(user_program, program)
    data = {key: examples(resolve(spec, home, key), key) for key, spec in zip(SPLITS, (trainset, devset, testset),
                                                                             strict=True)}
    inputs = tuple(data["trainset"][0].inputs().keys())
    for key, rows in data.items():
        for i, example in enumerate(rows):
            if tuple(example.inputs().keys()) != inputs:
                raise UserError(f"pipeline.{key}[{i}] has inputs {list(example.inputs().keys())}, trainset[0] has "
                                f"{list(inputs)}", "mark the same input fields on every example (.with_inputs)")
    score = resolve(metric, home, "metric")
    if not callable(score):
        raise UserError(f"pipeline.metric {metric!r} is a {type(score).__name__}, not a function",
                        "define metric(example, prediction, trace=None) -> float | bool")

    replay = Replay(user_program, names)
    predictors = {names[path]: (path, p) for path, p in user_program.named_predictors()}
    order, keys = trace(replay, list(predictors), data["trainset"], program)
    outputs = {key if key not in inputs else f"{key}__output": key for key in keys}
    fields = {name: (tuple(predictors[name][1].signature.input_fields), tuple(predictors[name][1].signature.output_fields))
              for name in order}
    components = []
    for i, name in enumerate(order):
        path, predictor = predictors[name]
        earlier = {p: fields[p] for p in order[:i]}
        components.append(PredictorInputs(replay, name, fields[name][0], inputs, earlier, order))
        components.append(PredictorStep(name, path, predictor, max_tokens))
    components.append(ProgramOutput(replay, inputs, fields, outputs, order))
    system = CompoundSystem(components, inputs=inputs, outputs=tuple(outputs))

    def to_program(config: SystemConfig) -> dspy.Module:
        """A copy of the user's program with each predictor's instructions from `config` (demos as they were)."""
        updated = user_program.deepcopy()
        for path, predictor in updated.named_predictors():
            predictor.signature = predictor.signature.with_instructions(str(config[names[path]]))
        return updated

    splits = Splits(*([example.toDict() for example in data[key]] for key in SPLITS))
    module = home.__name__.rpartition(".")[2]
    info = {"program": program, "predictors": {name: path for name, (path, _) in predictors.items()},
            "call_order": order, "traced_examples": min(len(data["trainset"]), TRACED_EXAMPLES)}
    return Pipeline(f"dspy_{module}", system, splits,
                    Metric(getattr(score, "__name__", "metric"), ProgramMetric(score, inputs, outputs)),
                    info=info, to_program=to_program)
