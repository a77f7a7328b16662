"""DSPy programs the dspy pipeline must refuse, each for one construct (they import dspy only, as a user's do)."""
from __future__ import annotations

import dspy

trainset = [dspy.Example(question=q, answer=a).with_inputs("question")
            for q, a in (("short?", "yes"), ("a much longer question?", "no"))]
devset = testset = trainset


def metric(example, prediction, trace=None) -> bool:
    return example.answer == prediction.answer


def lookup(term: str) -> str:
    """A tool."""
    return term


class Agent(dspy.Module):
    def __init__(self):
        super().__init__()
        self.agent = dspy.ReAct("question -> answer", tools=[lookup])

    def forward(self, question):
        return self.agent(question=question)


class Loop(dspy.Module):
    def __init__(self):
        super().__init__()
        self.hop = dspy.Predict("question -> answer")

    def forward(self, question):
        for _ in range(2):
            question = self.hop(question=question).answer or question
        return dspy.Prediction(answer=question)


class Fanout(dspy.Module):
    def __init__(self):
        super().__init__()
        self.ask = dspy.Predict("question -> answer")

    def forward(self, question):
        (prediction,) = dspy.Parallel(num_threads=2)([(self.ask, dspy.Example(question=question).with_inputs("question"))])
        return prediction


class Direct(dspy.Module):
    def __init__(self):
        super().__init__()
        self.ask = dspy.Predict("question -> answer")

    def forward(self, question):
        hint = dspy.settings.lm(question)
        return self.ask(question=f"{question} {hint}")


class Tools(dspy.Module):
    def __init__(self):
        super().__init__()
        self.ask = dspy.Predict("question, tools: list[dspy.Tool] -> answer")

    def forward(self, question):
        return self.ask(question=question, tools=[dspy.Tool(lookup)])


class Swapped(dspy.Module):
    """Calls its predictors in one order on short questions and the other on long ones."""

    def __init__(self):
        super().__init__()
        self.first = dspy.Predict("question -> answer")
        self.second = dspy.Predict("question -> answer")

    def forward(self, question):
        order = (self.first, self.second) if len(question) < 10 else (self.second, self.first)
        return dspy.Prediction(answer=[p(question=question).answer for p in order][-1])


agent, loop, fanout, direct, tools, swapped = Agent(), Loop(), Fanout(), Direct(), Tools(), Swapped()
