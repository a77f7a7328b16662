"""PubMedQA's floors (optimas_cli/report/floors.py): chance over the three labels and the training
majority label, scored on the run's own test examples."""
from __future__ import annotations

from collections import Counter

from optimas_cli.report.floors import Floor
from pipelines.pubmedqa.data import load_splits
from pipelines.pubmedqa.metric import LABELS


def train_examples(config: dict) -> list[dict]:
    """The training split the run saw: the loader's, cut at the run's budget.train_size."""
    size = (config.get("budget") or {}).get("train_size")
    train = load_splits(config.get("data_dir")).train
    return train if size is None else train[: int(size)]


def floors(train: list[dict], test: list[dict], config: dict) -> list[Floor]:
    majority, count = Counter(str(e["answer"]) for e in train).most_common(1)[0]
    return [
        Floor("chance", f"a uniformly random label of {', '.join(LABELS)}: 1/{len(LABELS)}",
              {e["key"]: 1 / len(LABELS) for e in test}),
        Floor(f"majority '{majority}'", f"always '{majority}', the most frequent label of the {len(train)} training "
              f"examples ({count} of them)", {e["key"]: float(str(e["answer"]) == majority) for e in test}),
    ]
