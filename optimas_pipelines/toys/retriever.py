"""Toy 1 (Chapter 5): a retriever picks passage A (lexically similar) or B (paraphrased, has the fact).

Keyword overlap prefers A on every query, but B gives the higher F1 on every query:
greedy-by-overlap scores 0.2625, an aligned local reward 0.85.
"""
from __future__ import annotations

from optimas_cli.system import Component
from optimas_pipelines.toys.base import FixedDownstream, per_instance_choice, toy_pipeline

# (question, passage A, passage B, overlap A, overlap B, F1 with A, F1 with B) -- the chapter's numbers.
QUERIES = [
    ("Which river flows through the capital of Hungary?",
     "The capital of Hungary is a famous river city, and many visitors ask which river flows through it.",
     "Budapest is split by the Danube, whose banks divide the hilly Buda side from flat Pest.",
     0.82, 0.35, 0.20, 0.90),
    ("Who wrote the novel that the film Blade Runner is based on?",
     "The film Blade Runner is based on a novel, and the novel was adapted by the film's writers.",
     "Ridley Scott's 1982 picture adapts Philip K. Dick's book Do Androids Dream of Electric Sheep?",
     0.75, 0.40, 0.30, 0.85),
    ("In which year did the first person walk on the Moon?",
     "The first person to walk on the Moon became famous in the year of the landing.",
     "Neil Armstrong stepped onto the lunar surface on 20 July 1969 during Apollo 11.",
     0.68, 0.55, 0.45, 0.70),
    ("What element has the chemical symbol Fe?",
     "The chemical symbol Fe belongs to an element; every element has a chemical symbol.",
     "Iron, from the Latin ferrum, is abbreviated Fe on the periodic table.",
     0.90, 0.20, 0.10, 0.95),
]


class PassageRetriever(Component):
    def __init__(self):
        super().__init__(
            "retriever",
            "Picks the passage the answer generator will read to answer the question.",
            inputs=("question", "passages"),
            outputs=("passage_id", "passage"),
            **per_instance_choice(choices=("A", "B")),
        )

    def forward(self, inputs, value, ctx):
        return [{"passage_id": value, "passage": x["passages"][value]["text"]} for x in inputs]

    def heuristic_score(self, inputs, outputs):
        """Naive local metric: keyword overlap between the question and the passage."""
        return inputs["passages"][outputs["passage_id"]]["overlap"]


def rows() -> list[dict]:
    out = []
    for i, (q, a, b, ov_a, ov_b, f1_a, f1_b) in enumerate(QUERIES, 1):
        out.append({
            "query_id": f"Q{i}",
            "question": q,
            "passages": {"A": {"text": a, "overlap": ov_a}, "B": {"text": b, "overlap": ov_b}},
            "reward": {"A": f1_a, "B": f1_b},
        })
    return out


def build(data_dir=None, **_):
    downstream = FixedDownstream(
        "generator", "Answers the question from the chosen passage (fixed model and prompt).", "passage_id"
    )
    return toy_pipeline("toy_retriever", PassageRetriever(), downstream, rows(), "f1")
