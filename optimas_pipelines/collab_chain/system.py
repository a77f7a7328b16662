"""Two trainable local models in a chain on PubMedQA rows, as in SysDPO's LLM-collaboration system:

    question, context -> evidence_reader (LoRA) -> notes          (psi1: x -> y)
    question, notes   -> answerer (LoRA)        -> answer         (psi2: y -> z, yes / no / maybe)

The answerer never sees the abstract, only the reader's notes, so the final accuracy depends on
both models and neither can be tuned in isolation: the setting where a trajectory-level preference
has to be split between the nodes. Both configurations are LoRA adapter folders on one local base
model (None = the base model), trained by the weights methods (sysdpo, reinforce, optimas' GRPO).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from optimas_cli.system import CompoundSystem, ConfigKind, Pipeline, SingleLLMTask
from optimas_cli.system.local_model_component import DEFAULT_BASE_MODEL, LocalModelComponent
from optimas_pipelines.pubmedqa.data import load_splits
from optimas_pipelines.pubmedqa.metric import METRIC
from optimas_pipelines.pubmedqa.prompts import single_llm_messages

BASE_MODEL = DEFAULT_BASE_MODEL


def reader_messages(question: str, context: str) -> list[dict]:
    user = (
        "You read biomedical abstracts for a colleague who will answer a question without seeing the abstract.\n\n"
        f"Abstract:\n{context}\n\nQuestion: {question}\n\n"
        "In two or three sentences, write down the findings of the abstract that answer the question."
    )
    return [{"role": "user", "content": user}]


def answerer_messages(question: str, notes: str) -> list[dict]:
    user = (
        f"A colleague's notes on a biomedical study:\n{notes}\n\nQuestion: {question}\n\n"
        "Answer with one word: yes, no or maybe. End with 'Answer: <yes/no/maybe>'."
    )
    return [{"role": "user", "content": user}]


@dataclass(eq=False)
class EvidenceReader(LocalModelComponent):
    def build_messages(self, input_dict: dict, value) -> list[dict]:
        return reader_messages(input_dict["question"], input_dict["context"])

    def parse_output(self, text: str) -> dict:
        return {"notes": text.strip()}


@dataclass(eq=False)
class Answerer(LocalModelComponent):
    def build_messages(self, input_dict: dict, value) -> list[dict]:
        return answerer_messages(input_dict["question"], input_dict["notes"])

    def parse_output(self, text: str) -> dict:
        return {"answer": text.strip()}  # the metric parses the decision (optimas_pipelines/pubmedqa/metric.py)


def build(data_dir: str | os.PathLike | None = None, base_model: str = BASE_MODEL, reader_max_tokens: int = 96,
          answerer_max_tokens: int = 24, single_llm_max_tokens: int = 96) -> Pipeline:
    components = [
        EvidenceReader(
            name="evidence_reader", description="Writes notes on what the abstract says about the question (LoRA).",
            inputs=("question", "context"), outputs=("notes",), kind=ConfigKind.WEIGHTS, default=None,
            base_model=base_model, max_tokens=reader_max_tokens,
        ),
        Answerer(
            name="answerer", description="Answers yes / no / maybe from the reader's notes alone (LoRA).",
            inputs=("question", "notes"), outputs=("answer",), kind=ConfigKind.WEIGHTS, default=None,
            base_model=base_model, max_tokens=answerer_max_tokens,
        ),
    ]
    return Pipeline(
        name="collab_chain",
        system=CompoundSystem(components, inputs=("question", "context"), outputs=("answer",)),
        splits=load_splits(data_dir),
        metric=METRIC,
        single_llm=SingleLLMTask(prompt=single_llm_messages, parse=lambda text: {"answer": text.strip()},
                                 max_tokens=single_llm_max_tokens),
        info={"base_model": base_model},
    )
