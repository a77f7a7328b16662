"""Toy 3 (Chapter 5): a hint generator and the brevity trap.

Brevity prefers the short hint everywhere (F1 0.42); the aligned choice is the long hint on Q1-Q4
and the short one on Q5, where the long hint adds a distracting entity (F1 0.81).
"""
from __future__ import annotations

from optimas_cli.system import Component
from optimas_pipelines.toys.base import FixedDownstream, per_instance_choice, toy_pipeline

# (question, short hint, long hint, F1 with short, F1 with long) -- the chapter's five queries.
QUERIES = [
    ("Which director of Jaws also directed a film about a lost extraterrestrial?",
     "The director.",
     "Steven Spielberg directed both Jaws (1975) and E.T. the Extra-Terrestrial (1982).",
     0.25, 0.92),
    ("What university did the author of The Hobbit teach at?",
     "The author taught.",
     "J. R. R. Tolkien, who wrote The Hobbit, was a professor at the University of Oxford.",
     0.30, 0.88),
    ("Which ocean lies west of Portugal?",
     "The Atlantic Ocean.",
     "Portugal's whole western coast faces the Atlantic Ocean, the ocean west of Portugal.",
     0.70, 0.75),
    ("Which band was the drummer of Nirvana later the founder of?",
     "The drummer founded one.",
     "Dave Grohl, Nirvana's drummer, later founded the band Foo Fighters in 1994.",
     0.20, 0.85),
    ("What is the capital of Australia?",
     "Canberra.",
     "Canberra is the capital, though Sydney and Melbourne are larger and Sydney is often assumed.",
     0.65, 0.60),
]


class HintGenerator(Component):
    def __init__(self):
        super().__init__(
            "hint_generator",
            "Writes a hint that helps the answer generator answer the multi-hop question.",
            inputs=("question", "hints"),
            outputs=("hint_kind", "hint"),
            **per_instance_choice(choices=("short", "long")),
        )

    def forward(self, inputs, value, ctx):
        return [{"hint_kind": value, "hint": x["hints"][value]} for x in inputs]

    def heuristic_score(self, inputs, outputs):
        """Naive local metric: brevity -- fewer words score higher."""
        return -len(outputs["hint"].split())


def rows() -> list[dict]:
    return [
        {"query_id": f"Q{i}", "question": q, "hints": {"short": s, "long": lg}, "reward": {"short": fs, "long": fl}}
        for i, (q, s, lg, fs, fl) in enumerate(QUERIES, 1)
    ]


def build(data_dir=None, **_):
    downstream = FixedDownstream(
        "answer_generator", "Answers the question using the hint (fixed model and prompt).", "hint_kind"
    )
    return toy_pipeline("toy_hint", HintGenerator(), downstream, rows(), "f1")
