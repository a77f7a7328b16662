"""optimas from Python: run an experiment with the command line's overrides, then load the optimized
system it found and call it on inputs it has never seen.

    python examples/python_api.py [more overrides, e.g. lrf.backbone=<folder>]

Chapter 5's hint toy: Optimas learns a local reward for the hint generator and routes each question
to the hint (short or long) that reward prefers; the loaded system routes new questions the same way.
"""
from __future__ import annotations

import sys

import optimas_cli.api as optimas

NEW_QUESTIONS = [
    {"query_id": "N1", "question": "Which composer wrote the Moonlight Sonata and went deaf later in life?",
     "hints": {"short": "The composer.",
               "long": "Ludwig van Beethoven wrote the Moonlight Sonata (1801) and lost his hearing later in life."}},
    {"query_id": "N2", "question": "What is the capital of Canada?",
     "hints": {"short": "Ottawa.",
               "long": "Ottawa is the capital, though Toronto and Montreal are larger and Toronto is often assumed."}},
]


def main(*overrides: str) -> None:
    result = optimas.run("pipeline=toy_hint", "method=optimas", "budget=smoke", "repeats=1", *overrides)
    print(f"test {result.results['metric']}: {result.test['mean']:.4f} · folder {result.folder}")

    system = optimas.load(result.folder)  # configuration, adapters and LRF routes of that run
    print(f"configuration: {dict(system.config)}")
    for question, output in zip(NEW_QUESTIONS, system(NEW_QUESTIONS), strict=True):
        print(f"{question['query_id']}: routed to the {output['used_option']} hint")


if __name__ == "__main__":
    main(*sys.argv[1:])
