"""PubMedQA's floors (optimas_cli/report/floors.py): chance over the three labels and the training
majority label, scored on the run's own test examples."""
from __future__ import annotations

from optimas_cli.report.floors import Floor, budget_cut, majority_floor
from optimas_pipelines.pubmedqa.data import load_splits
from optimas_pipelines.pubmedqa.metric import LABELS


def train_examples(config: dict) -> list[dict]:
    """The training split the run saw: the loader's, cut at the run's budget.train_size."""
    return budget_cut(load_splits(config.get("data_dir")).train, config)


def floors(train: list[dict], test: list[dict], config: dict) -> list[Floor]:
    return [
        Floor("chance", f"a uniformly random label of {', '.join(LABELS)}: 1/{len(LABELS)}",
              {e["key"]: 1 / len(LABELS) for e in test}),
        majority_floor([str(e["answer"]) for e in train], test, lambda a, e: float(str(e["answer"]) == a)),
    ]
