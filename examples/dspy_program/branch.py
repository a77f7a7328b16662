"""Three predictors and a branch: classify the question, then answer it with the predictor for its kind.

    optimas run pipeline=dspy program=branch:program budget=smoke     (from this folder)
"""
from __future__ import annotations

from typing import Literal

import dspy
from corpus import devset, metric, search, testset, trainset  # noqa: F401  (the pipeline reads them from here)


class Route(dspy.Signature):
    """Is the question about a person or about a place?"""

    question: str = dspy.InputField()
    topic: Literal["person", "place"] = dspy.OutputField()


class Branch(dspy.Module):
    def __init__(self):
        super().__init__()
        self.route = dspy.Predict(Route)
        self.person = dspy.Predict("context: list[str], question -> answer")
        self.place = dspy.Predict("question -> answer")

    def forward(self, question: str):
        if self.route(question=question).topic == "person":
            return dspy.Prediction(answer=self.person(context=search(question), question=question).answer)
        return dspy.Prediction(answer=self.place(question=question).answer)


program = Branch()
