"""BigCodeBench's floors (optimas_cli/report/floors.py): none is defined. A pass rate has no chance level
(a guessed program is not a draw from a finite set of answers), no label recurs for a majority, and no
rule without an LM writes code; the report says so beside the methods instead of inventing one."""
from __future__ import annotations

from optimas_cli.report.floors import Floor


def train_examples(config: dict) -> list[dict]:
    """No floor here learns from training examples."""
    return []


def floors(train: list[dict], test: list[dict], config: dict) -> list[Floor]:
    return [Floor("chance", "not defined: generated code is scored by running its tests; there is no finite set "
                  "of answers to guess among, and no no-LM rule writes code", None)]
