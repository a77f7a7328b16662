"""A two-component question answering chain, written outside optimas: the whole contract.

    question -> recaller (prompt) -> facts -> answerer (prompt) -> answer

optimas calls `build(data_dir, **keys)` with the keys of the pipeline's YAML (conf/pipeline/qa_chain.yaml)
and gets back a Pipeline: the system, its train / validation / test examples and the global metric.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from optimas_cli.system import CompoundSystem, Metric, Pipeline, Splits
from optimas_cli.system.parsing import Unparsed
from optimas_cli.system.prompt_component import PromptComponent, strip_label

HERE = Path(__file__).resolve().parent


def first_line(label: str):
    """The reply's first non-empty line, without a repeated 'Label:'; an empty reply is a counted parse failure."""
    def parse(text: str, inputs: dict) -> str:
        lines = [ln for ln in text.splitlines() if ln.strip()]
        if not lines:
            raise Unparsed("")
        return strip_label(lines[0], (label,))
    return parse


def contains_answer(example: dict, output: dict) -> float:
    """1 when the gold answer appears in the reply as whole words (case and punctuation ignored)."""
    def words(s: str) -> str:
        return " " + " ".join(re.findall(r"\w+", s.lower())) + " "
    return float(words(example["answer"]) in words(output["answer"]))


def build(data_dir=None, questions: str = "questions.jsonl", train_size: int = 6, val_size: int = 4,
          max_tokens: int = 48, **_) -> Pipeline:
    path = Path(questions) if Path(questions).is_absolute() else HERE / questions
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    recaller = PromptComponent(
        "recaller", "Recalls facts that help answer the question.",
        inputs={"question": "Question"}, output="facts",
        instruction="Write one short sentence of facts that help answer the question.",
        reply_format="Facts:", parse=first_line("Facts"), max_tokens=max_tokens,
        alternatives=("State the single most relevant fact about the question's subject.",))
    answerer = PromptComponent(
        "answerer", "Answers the question in a few words, using the facts.",
        inputs={"question": "Question", "facts": "Facts"}, output="answer",
        instruction="Answer the question in as few words as possible.",
        reply_format="Answer:", parse=first_line("Answer"), max_tokens=max_tokens,
        alternatives=("Reply with only the answer: a name, a number or a word.",))
    system = CompoundSystem([recaller, answerer], inputs=("question",), outputs=("answer",))
    train, val, test = rows[:train_size], rows[train_size:train_size + val_size], rows[train_size + val_size:]
    return Pipeline(name="qa_chain", system=system, splits=Splits(train, val, test),
                    metric=Metric("contains_answer", contains_answer))
