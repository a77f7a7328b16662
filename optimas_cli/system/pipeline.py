"""A pipeline: a compound system together with its data splits, global reward and single-LLM task."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from optimas_cli.system.compound import CompoundSystem
from optimas_cli.system.configuration import SystemConfig


@dataclass
class Metric:
    """The global reward R(example, final_output) -> float, with a name for tables.

    `batch_fn`, when given, scores many (example, output) pairs at once — e.g. running unit tests
    in parallel sandboxes — and must agree with `fn` pair by pair.
    """

    name: str
    fn: Callable[[dict, dict], float]
    batch_fn: Callable[[Sequence[dict], Sequence[dict]], list[float]] | None = None

    def __call__(self, example: dict, output: dict) -> float:
        return float(self.fn(example, output))

    def many(self, examples: Sequence[dict], outputs: Sequence[dict]) -> list[float]:
        if len(examples) != len(outputs):
            raise ValueError(f"metric {self.name!r}: {len(examples)} examples but {len(outputs)} outputs")
        if self.batch_fn is None:
            return [self(ex, out) for ex, out in zip(examples, outputs, strict=True)]
        return [float(score) for score in self.batch_fn(list(examples), list(outputs))]


@dataclass
class Splits:
    train: list[dict]
    val: list[dict]
    test: list[dict]

    def sizes(self) -> dict[str, int]:
        return {"train": len(self.train), "val": len(self.val), "test": len(self.test)}


@dataclass
class SingleLLMTask:
    """The 'Single LLM' baseline: one LM call on the raw task, its answer parsed into final outputs."""

    prompt: Callable[[dict], list[dict]]  # example -> chat messages
    parse: Callable[[str], dict]  # completion -> final output fields
    max_tokens: int = 256


@dataclass
class Pipeline:
    name: str
    system: CompoundSystem
    splits: Splits
    metric: Metric
    single_llm: SingleLLMTask | None = None
    info: dict = field(default_factory=dict)  # loader facts worth reporting (e.g. tasks skipped)
    # The system in the form its user wrote it, with a configuration applied (pipeline=dspy: the DSPy program
    # with the configuration's instructions); `optimas export --program` saves it, `api.load(...).program()`
    # returns it. None: the pipeline is only its components.
    to_program: Callable[[SystemConfig], Any] | None = None
