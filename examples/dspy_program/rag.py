"""Two predictors and a retriever: write a search query, retrieve passages (BM25 in plain Python), answer.

    optimas run pipeline=dspy program=rag:program budget=smoke     (from this folder)
"""
from __future__ import annotations

import dspy
from corpus import devset, metric, search, testset, trainset  # noqa: F401  (the pipeline reads them from here)


class RAG(dspy.Module):
    def __init__(self):
        super().__init__()
        self.generate_query = dspy.Predict("question -> query")
        self.answer = dspy.Predict("context: list[str], question -> answer")

    def forward(self, question: str):
        query = self.generate_query(question=question).query
        context = search(query or question)
        return dspy.Prediction(context=context, answer=self.answer(context=context, question=question).answer)


program = RAG()
