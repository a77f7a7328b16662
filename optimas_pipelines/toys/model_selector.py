"""Toy 2 (Chapter 5): a per-question model selector and the leaderboard trap.

A context-free leaderboard (X 0.71 > Y 0.63) picks X on every query: accuracy 0.333. An aligned
local reward picks the model that is right on each question: 0.833 (Q5: neither model is right).
"""
from __future__ import annotations

from optimas_cli.system import Component
from optimas_pipelines.toys.base import FixedDownstream, per_instance_choice, toy_pipeline

LEADERBOARD = {"X": 0.71, "Y": 0.63}

# (question, correct if X, correct if Y) -- the chapter's six queries.
QUERIES = [
    ("Does aspirin reduce the risk of a second heart attack in adults?", 1, 0),
    ("Is maternal vitamin D status linked to infant bone density at birth?", 0, 1),
    ("Do statins change the rate of delirium after cardiac surgery?", 0, 1),
    ("Does regular exercise lower resting blood pressure in older adults?", 1, 0),
    ("Is serum ferritin a reliable marker of iron stores during acute infection?", 0, 0),
    ("Does early mobilisation shorten hospital stay after hip fracture surgery?", 0, 1),
]


class ModelSelector(Component):
    def __init__(self):
        super().__init__(
            "model_selector",
            "Chooses which language model answers this biomedical yes/no question.",
            inputs=("question",),
            outputs=("model",),
            **per_instance_choice(choices=("X", "Y")),
        )

    def forward(self, inputs, value, ctx):
        return [{"model": value} for _ in inputs]

    def heuristic_score(self, inputs, outputs):
        """Naive local metric: the model's general leaderboard score, the same for every question."""
        return LEADERBOARD[outputs["model"]]


def rows() -> list[dict]:
    return [
        {"query_id": f"Q{i}", "question": q, "reward": {"X": float(x), "Y": float(y)}}
        for i, (q, x, y) in enumerate(QUERIES, 1)
    ]


def build(data_dir=None, **_):
    downstream = FixedDownstream("classifier", "Answers yes/no with the selected model (fixed prompt).", "model")
    return toy_pipeline("toy_model_selector", ModelSelector(), downstream, rows(), "accuracy")
