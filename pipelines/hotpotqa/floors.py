"""HotpotQA's floors (optimas_cli/report/floors.py): the training split's most frequent answer, given to
every test question and scored by the pipeline's answer F1 (HotpotQA's comparison questions make 'yes'
a real floor). No chance level: answers are open text."""
from __future__ import annotations

from collections import Counter

from optimas_cli.report.floors import Floor
from pipelines.hotpotqa.data import DEFAULT_TRAIN_SIZE, DEFAULT_VAL_SIZE, load_rows, make_splits
from pipelines.hotpotqa.metric import f1_score, normalize_answer


def train_examples(config: dict) -> list[dict]:
    """The training split the run saw: the pipeline's shuffled pool at its seed and sizes, cut at the
    run's budget.train_size."""
    pipeline = config.get("pipeline") or {}
    train_size = int(pipeline.get("train_size") or DEFAULT_TRAIN_SIZE)
    val_size = int(pipeline.get("val_size") or DEFAULT_VAL_SIZE)
    rows = load_rows(config.get("data_dir"), seed=int(pipeline.get("seed") or 0), min_pool=train_size + val_size)
    train = make_splits(rows, train_size, val_size, 0).train
    size = (config.get("budget") or {}).get("train_size")
    return train if size is None else train[: int(size)]


def floors(train: list[dict], test: list[dict]) -> list[Floor]:
    floors_ = [Floor("chance", "not defined: answers are open text, not a choice among a finite set", None)]
    if train:
        answer, count = Counter(normalize_answer(e["gold_answer"]) for e in train).most_common(1)[0]
        floors_.append(Floor(f"majority '{answer}'", f"always '{answer}', the most frequent (normalized) answer of "
                             f"the {len(train)} training questions ({count} of them), scored by answer F1",
                             {e["key"]: f1_score(answer, e["gold_answer"]) for e in test}))
    return floors_
