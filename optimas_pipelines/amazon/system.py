"""Amazon next-item selection as in the paper: two trainable local models and a prompted decider.

    sequence -> session_analyzer (LoRA) -> context
    context, choices -> candidate_profiler (LoRA) -> feedback
    context, feedback, choices -> next_item_decider (prompt) -> answer (index of the chosen item)

The analyzer's and profiler's configuration is a LoRA adapter folder on a local base model
(None = the base model itself); the RL optimizer trains new adapters through `build_messages`,
`parse_output` and `base_model_path`, and sets the component to the adapter it produced.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import ClassVar

from optimas_cli.system import Component, CompoundSystem, ConfigKind, Pipeline, RunContext, SingleLLMTask
from optimas_cli.system.local_model_component import DEFAULT_BASE_MODEL, LocalModelComponent
from optimas_cli.system.parsing import PARSE_FAILURES
from optimas_pipelines.amazon import prompts
from optimas_pipelines.amazon.data import load_splits
from optimas_pipelines.amazon.metric import METRIC, parse_choice

BASE_MODEL = DEFAULT_BASE_MODEL


@dataclass(eq=False)
class SessionAnalyzer(LocalModelComponent):
    def build_messages(self, input_dict: dict, value) -> list[dict]:
        return prompts.analyzer_messages(input_dict["sequence"])

    def parse_output(self, text: str) -> dict:
        return {"context": text.strip()}


@dataclass(eq=False)
class CandidateProfiler(LocalModelComponent):
    def build_messages(self, input_dict: dict, value) -> list[dict]:
        return prompts.profiler_messages(input_dict["context"], input_dict["choices"])

    def parse_output(self, text: str) -> dict:
        return {"feedback": text.strip()}


@dataclass(eq=False)
class NextItemDecider(Component):
    """Picks the next item from the summary and the per-candidate feedback; outputs its index."""

    calls_lm: ClassVar[bool] = True

    model: str | None = None  # None: the run's LM (the paper used an API model here)
    max_tokens: int = 32

    def forward(self, inputs: list[dict], value, ctx: RunContext) -> list[dict]:
        messages = [prompts.decider_messages(value, x["context"], x["feedback"], x["choices"]) for x in inputs]
        texts = ctx.complete(self.name, messages, model=self.model, max_tokens=self.max_tokens)
        answers = [parse_choice(text, x["choices"]) for text, x in zip(texts, inputs, strict=True)]
        ctx.count(self.name, PARSE_FAILURES, answers.count(""))  # no candidate named: scored as wrong
        return [{"answer": a} for a in answers]


def build_system(
    base_model: str, decider_model: str | None, analyzer_max_tokens: int, profiler_max_tokens: int,
    decider_max_tokens: int,
) -> CompoundSystem:
    components = [
        SessionAnalyzer(
            name="session_analyzer",
            description="Summarizes the user's browsing session into their shopping intent (local LM, LoRA).",
            inputs=("sequence",), outputs=("context",), kind=ConfigKind.WEIGHTS, default=None,
            base_model=base_model, max_tokens=analyzer_max_tokens,
        ),
        CandidateProfiler(
            name="candidate_profiler",
            description="Comments on why the user would or would not view each candidate next (local LM, LoRA).",
            inputs=("context", "choices"), outputs=("feedback",), kind=ConfigKind.WEIGHTS, default=None,
            base_model=base_model, max_tokens=profiler_max_tokens,
        ),
        NextItemDecider(
            name="next_item_decider",
            description="Chooses the candidate the user views next from the summary and the feedback.",
            inputs=("context", "feedback", "choices"), outputs=("answer",),
            kind=ConfigKind.PROMPT, default=prompts.DECIDER_INSTRUCTION,
            alternatives=prompts.DECIDER_ALTERNATIVES, format_constraints=prompts.DECIDER_FORMAT_CONSTRAINTS,
            model=decider_model, max_tokens=decider_max_tokens,
        ),
    ]
    return CompoundSystem(components, inputs=("sequence", "choices"), outputs=("answer",))


def build(
    data_dir: str | os.PathLike | None = None,
    base_model: str = BASE_MODEL,
    decider_model: str | None = None,
    analyzer_max_tokens: int = 128,
    profiler_max_tokens: int = 192,
    decider_max_tokens: int = 32,
    single_llm_max_tokens: int = 32,
    stratified_subsets: bool = False,
) -> Pipeline:
    system = build_system(base_model, decider_model, analyzer_max_tokens, profiler_max_tokens, decider_max_tokens)
    return Pipeline(
        name="amazon",
        system=system,
        splits=load_splits(data_dir, stratified=stratified_subsets),
        metric=METRIC,
        # The reply is kept whole: only the metric knows the example's choices, so it parses the
        # index there (titles in the reply included), exactly as it re-parses the decider's index.
        single_llm=SingleLLMTask(
            prompt=prompts.single_llm_messages,
            parse=lambda text: {"answer": text.strip()},
            max_tokens=single_llm_max_tokens,
        ),
        info={"base_model": base_model, "decider_model": decider_model},
    )
