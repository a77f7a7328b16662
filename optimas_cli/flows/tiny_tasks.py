"""Tiny learnable tasks for the tiny models (tiny_models.py): keyword preference pairs a local reward model learns
in seconds, and a weights-kind component with a reward that GRPO moves. `optimas device-check` and the tests
train on them."""
from __future__ import annotations

import random

from optimas_cli.lrf.pairs import PreferencePair
from optimas_cli.system.component import Component, ConfigKind

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda red green blue yellow orange".split()


def keyword_pairs(n: int, seed: int, component: str = "gen", good: str = "correct", bad: str = "wrong"):
    """Outputs holding the right keyword beat those holding another one; everything else is noise."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        question = {"question": " ".join(rng.sample(WORDS, 3))}
        filler = lambda: " ".join(rng.sample(WORDS, 4))  # noqa: E731
        out.append(PreferencePair(component, question, {"answer": f"{filler()} {good} {filler()}"},
                                  {"answer": f"{filler()} {bad} {filler()}"}, 1.0, rng.choice([0.0, 0.5])))
    return out


class Reviewer(Component):
    """A weights-kind component: the tiny local LM (base + LoRA adapter, served by the real local
    provider) writes a verdict for a review."""

    def __init__(self, base_model: str):
        super().__init__(
            name="reviewer", description="judges a review", inputs=("review",), outputs=("verdict",),
            kind=ConfigKind.WEIGHTS,
        )
        self.base_model = base_model

    def base_model_path(self) -> str:
        return self.base_model

    def build_messages(self, inputs: dict, value) -> list[dict]:
        return [{"role": "user", "content": inputs["review"]}]

    def parse_output(self, text: str) -> dict:
        return {"verdict": text.strip()}

    def forward(self, inputs, value, ctx):
        messages = [self.build_messages(x, value) for x in inputs]
        texts = ctx.complete(self.name, messages, model=self.base_model, adapter=value, max_tokens=8)
        return [self.parse_output(t) for t in texts]


class LetterReward:
    """r_k: the share of characters that are 'a' — varies between random completions, so the
    GRPO advantages are non-zero and a step must move the adapter."""

    def __init__(self):
        self.calls = 0

    def score(self, name, inputs, outputs):
        self.calls += 1
        return [o["verdict"].count("a") / max(1, len(o["verdict"])) for o in outputs]


SEARCH = [{"review": "the product is good"}, {"review": "the cat ate a bad apple"}, {"review": "a short answer"}]
