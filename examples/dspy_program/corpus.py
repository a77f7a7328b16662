"""A tiny corpus, its questions and a metric, shared by the example programs (they import dspy only)."""
from __future__ import annotations

import math
import re
from collections import Counter

import dspy

PASSAGES = [
    "Marie Curie was a physicist and chemist who was born in Warsaw.",
    "Ada Lovelace was a mathematician who was born in London.",
    "Alan Turing was a mathematician who was born in London.",
    "Nikola Tesla was an inventor who was born in Smiljan.",
    "Frida Kahlo was a painter who was born in Coyoacan.",
    "Albert Einstein was a physicist who was born in Ulm.",
    "Paris is the capital of France and lies on the Seine.",
    "Rome is the capital of Italy and lies on the Tiber.",
    "Vienna is the capital of Austria and lies on the Danube.",
    "Cairo is the capital of Egypt and lies on the Nile.",
    "London is the capital of England and lies on the Thames.",
    "Warsaw is the capital of Poland and lies on the Vistula.",
]
QUESTIONS = [
    ("Where was Marie Curie born?", "Warsaw"), ("Where was Ada Lovelace born?", "London"),
    ("Where was Nikola Tesla born?", "Smiljan"), ("Where was Frida Kahlo born?", "Coyoacan"),
    ("Where was Albert Einstein born?", "Ulm"), ("Where was Alan Turing born?", "London"),
    ("Which river does Paris lie on?", "Seine"), ("Which river does Rome lie on?", "Tiber"),
    ("Which river does Vienna lie on?", "Danube"), ("Which river does Cairo lie on?", "Nile"),
    ("Which river does London lie on?", "Thames"), ("Which river does Warsaw lie on?", "Vistula"),
    ("What was Marie Curie's profession?", "physicist"), ("What was Frida Kahlo's profession?", "painter"),
    ("What was Nikola Tesla's profession?", "inventor"), ("Which country is Vienna the capital of?", "Austria"),
]


def _tokens(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower())


class BM25:
    """Okapi BM25 over the passages (k1 1.5, b 0.75): the program's retriever, plain Python."""

    def __init__(self, passages: list[str], k1: float = 1.5, b: float = 0.75):
        self.passages, self.k1, self.b = passages, k1, b
        self.docs = [Counter(_tokens(p)) for p in passages]
        self.mean_length = sum(sum(d.values()) for d in self.docs) / len(self.docs)
        df = Counter(t for d in self.docs for t in d)
        self.idf = {t: math.log(1 + (len(self.docs) - n + 0.5) / (n + 0.5)) for t, n in df.items()}

    def __call__(self, query: str, k: int = 2) -> list[str]:
        def score(doc: Counter) -> float:
            length = sum(doc.values())
            return sum(self.idf.get(t, 0.0) * doc[t] * (self.k1 + 1)
                       / (doc[t] + self.k1 * (1 - self.b + self.b * length / self.mean_length)) for t in _tokens(query))

        ranked = sorted(range(len(self.docs)), key=lambda i: -score(self.docs[i]))
        return [self.passages[i] for i in ranked[:k]]


search = BM25(PASSAGES)
examples = [dspy.Example(question=q, answer=a).with_inputs("question") for q, a in QUESTIONS]
trainset, devset, testset = examples[:8], examples[8:12], examples[12:]


def metric(example, prediction, trace=None) -> bool:
    """The gold answer appears in the predicted answer (case-insensitive)."""
    return example.answer.lower() in str(prediction.answer or "").lower()
