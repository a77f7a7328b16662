"""PubMedQA as in the paper: two per-instance model selectors, a context analyst and a problem solver.

    question, context -> context_model_selector -> context_model
    question, context, context_model -> context_analyst -> summary
    question, context, summary -> solver_model_selector -> solver_model
    question, summary, solver_model -> problem_solver -> answer (yes / no / maybe)

A selector's configuration is either one model for every question (the unoptimized default is
the first candidate) or a routing policy: {"route": "heuristic"} takes the model with the highest
fixed prior (a leaderboard, the naive policy), {"route": "lrf"} the model whose output the
selector's local reward function scores highest for this question.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from optimas_cli.errors import UserError
from optimas_cli.lm.local.registry import is_local
from optimas_cli.system import Component, CompoundSystem, ConfigKind, Pipeline, RunContext, SingleLLMTask
from optimas_cli.system.parsing import PARSE_FAILURES
from optimas_pipelines.pubmedqa import prompts
from optimas_pipelines.pubmedqa.data import load_splits
from optimas_pipelines.pubmedqa.metric import DEFAULT_DECISION, METRIC, parse_decision

LOCAL_MODELS = ("local/smollm2-135m-instruct", "local/gemma-3-270m")


@dataclass(eq=False)
class ModelSelector(Component):
    """Chooses which candidate model a downstream LM component runs with; outputs the model's name."""

    priors: dict[str, float] = field(default_factory=dict)  # model -> leaderboard-style score

    def forward(self, inputs: list[dict], value, ctx: RunContext) -> list[dict]:
        if value not in self.choices:
            raise UserError(
                f"component {self.name!r} is configured with model {value!r}, which is not a candidate",
                f"pick one of {list(self.choices)} or add it to the pipeline's candidate_models",
            )
        return [{self.outputs[0]: value} for _ in inputs]

    def heuristic_score(self, inputs: dict, outputs: dict) -> float:
        model = outputs[self.outputs[0]]
        if model not in self.priors:
            raise UserError(
                f"component {self.name!r} routes by model priors, but model_priors has no score for {model!r}",
                "give every candidate model a score under the pipeline's model_priors",
            )
        return float(self.priors[model])


@dataclass(eq=False)
class ContextAnalyst(Component):
    """Summarizes the abstract's evidence for the question, with the model its selector chose."""

    calls_lm: ClassVar[bool] = True
    model_field: ClassVar[str] = "context_model"  # the input naming the model it runs with

    max_tokens: int = 128

    def forward(self, inputs: list[dict], value, ctx: RunContext) -> list[dict]:
        messages = [prompts.analyst_messages(value, x["question"], x["context"]) for x in inputs]
        models = [x[self.model_field] for x in inputs]
        texts = complete_per_model(ctx, self.name, messages, models, max_tokens=self.max_tokens)
        ctx.count(self.name, PARSE_FAILURES, sum(not text.strip() for text in texts))  # an empty summary
        return [{"summary": text.strip()} for text in texts]


@dataclass(eq=False)
class ProblemSolver(Component):
    """Answers yes/no/maybe from the analyst's summary, with the model its selector chose."""

    calls_lm: ClassVar[bool] = True
    model_field: ClassVar[str] = "solver_model"

    max_tokens: int = 96

    def forward(self, inputs: list[dict], value, ctx: RunContext) -> list[dict]:
        messages = [prompts.solver_messages(value, x["question"], x["summary"]) for x in inputs]
        models = [x[self.model_field] for x in inputs]
        texts = complete_per_model(ctx, self.name, messages, models, max_tokens=self.max_tokens)
        decisions = [parse_decision(text, default=None) for text in texts]
        ctx.count(self.name, PARSE_FAILURES, decisions.count(None))  # no label found: the default is used
        return [{"answer": d or DEFAULT_DECISION} for d in decisions]


def complete_per_model(
    ctx: RunContext, component: str, messages: list[list[dict]], models: Sequence[str], **request
) -> list[str]:
    """One LM batch per distinct model (so a local model still batches), results in input order."""
    texts: list[str] = [""] * len(messages)
    for model in dict.fromkeys(models):
        where = [i for i, m in enumerate(models) if m == model]
        for i, text in zip(where, ctx.complete(component, [messages[i] for i in where], rows=where, model=model,
                                                 **request),
                           strict=True):
            texts[i] = text
    return texts


def candidate_list(lm_model: str, listed: Sequence[str], local_extra: Sequence[str]) -> list[str]:
    """What the selectors choose from: the run's LM first (the unoptimized default), then the listed
    models, then `local_extra` when the run's LM is itself an embedded model (the offline pair). A run on
    a server or an API thus calls only that model unless the config names others."""
    listed = [str(m) for m in listed]
    if any(not m.strip() for m in listed) or len(set(listed)) != len(listed):
        raise UserError(
            f"pipeline pubmedqa: candidate_models must be distinct, non-empty model names (got {listed})",
            "list each model once, e.g. pipeline.candidate_models=[openai/gpt-4o-mini]; the run's lm.model is added first",
        )
    extra = [str(m) for m in local_extra] if is_local(str(lm_model)) else []
    return list(dict.fromkeys([str(lm_model), *listed, *extra]))


def build_system(
    candidate_models: Sequence[str], model_priors: dict[str, float], analyst_max_tokens: int, solver_max_tokens: int
) -> CompoundSystem:
    candidates = tuple(candidate_models)
    selector = {"kind": ConfigKind.CHOICE, "choices": candidates, "default": candidates[0], "per_instance": True,
                "priors": dict(model_priors)}
    components = [
        ModelSelector(
            name="context_model_selector",
            description="Chooses, per question, the model the context analyst runs with.",
            inputs=("question", "context"), outputs=("context_model",), **selector,
        ),
        ContextAnalyst(
            name="context_analyst",
            description="Summarizes the key information of the context needed to answer the question.",
            inputs=("question", "context", "context_model"), outputs=("summary",),
            kind=ConfigKind.PROMPT, default=prompts.ANALYST_INSTRUCTION, max_tokens=analyst_max_tokens,
            alternatives=prompts.ALTERNATIVES["context_analyst"],
            format_constraints=prompts.FORMAT_CONSTRAINTS["context_analyst"],
        ),
        ModelSelector(
            name="solver_model_selector",
            description="Chooses, per question, the model the problem solver runs with.",
            inputs=("question", "context", "summary"), outputs=("solver_model",), **selector,
        ),
        ProblemSolver(
            name="problem_solver",
            description="Answers the question with yes, no or maybe from the analyst's summary.",
            inputs=("question", "summary", "solver_model"), outputs=("answer",),
            kind=ConfigKind.PROMPT, default=prompts.SOLVER_INSTRUCTION, max_tokens=solver_max_tokens,
            alternatives=prompts.ALTERNATIVES["problem_solver"],
            format_constraints=prompts.FORMAT_CONSTRAINTS["problem_solver"],
        ),
    ]
    return CompoundSystem(components, inputs=("question", "context"), outputs=("answer",))


def build(
    data_dir: str | os.PathLike | None = None,
    lm_model: str = LOCAL_MODELS[0],
    candidate_models: Sequence[str] = (),
    local_candidate_models: Sequence[str] = LOCAL_MODELS[1:],
    model_priors: dict[str, float] | None = None,
    analyst_max_tokens: int = 128,
    solver_max_tokens: int = 96,
    single_llm_max_tokens: int = 96,
) -> Pipeline:
    candidates = candidate_list(lm_model, candidate_models, local_candidate_models)
    priors = {str(k): float(v) for k, v in (model_priors or {}).items()}
    system = build_system(candidates, priors, analyst_max_tokens, solver_max_tokens)
    return Pipeline(
        name="pubmedqa",
        system=system,
        splits=load_splits(data_dir),
        metric=METRIC,
        single_llm=SingleLLMTask(
            prompt=prompts.single_llm_messages,
            parse=lambda text: {"answer": parse_decision(text)},
            max_tokens=single_llm_max_tokens,
        ),
        info={"candidate_models": candidates, "model_priors": priors},
    )
