"""Floors: what a method must beat before any gain of it means something, scored on the very test
examples the runs were scored on.

Each pipeline declares its own in `optimas_pipelines/<name>/floors.py`, one shape for all:

    train_examples(config: dict) -> list[dict]   the training split the run saw (its loader, capped by
                                                 the run's budget.train_size), in the loader's order
    floors(train, test, config) -> list[Floor]   chance, the training majority, a cheap no-LM rule...;
                                                 a floor that is not defined says so (scores None);
                                                 config (the run's) for a rule that needs the pipeline's
                                                 own resources (HotpotQA's BM25 corpus)
    group(example) -> str                        optional: the subgroup an example belongs to (Amazon:
                                                 its source file), for per-group rows

The test examples are rebuilt from the run's predictions.jsonl.gz (its system inputs plus gold fields,
as scored), so a floor never sees a different test set than the methods beside it.
"""
from __future__ import annotations

import importlib
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from optimas_cli.errors import UserError
from optimas_cli.report.evidence import Comparison, compare, seed_scores
from optimas_cli.report.runs import Run
from optimas_cli.system.traces import predictions_path, read_predictions


@dataclass(frozen=True)
class Floor:
    name: str                          # 'majority index'
    how: str                           # how it was built: 'the most frequent answer of the 50 training examples: 2'
    scores: dict[str, float] | None    # per test example key; None: not defined for this task (`how` says why)

    @property
    def mean(self) -> float | None:
        return sum(self.scores.values()) / len(self.scores) if self.scores else None


def budget_cut(train: list[dict], config: dict) -> list[dict]:
    """The first budget.train_size training examples, as flows/setup.budget_splits gave them to the run."""
    size = (config.get("budget") or {}).get("train_size")
    return train if size is None else train[: int(size)]


def majority_floor(train_answers: list[str], test: list[dict], score: Callable[[str, dict], float],
                   shown: Callable[[str], str] = lambda a: f"'{a}'") -> Floor:
    """Always the most frequent training answer, each test example scored by `score(answer, example)`.
    Answers tied for most frequent share the floor (its score is their mean, as a pick among them would
    average); where no answer recurs the majority is not defined, an arbitrary pick not a floor."""
    counts = Counter(train_answers)
    top = max(counts.values(), default=0)
    if top < 2:
        return Floor("majority", f"not defined: no answer recurs among the {len(train_answers)} training examples",
                     None)
    tied = sorted(a for a, n in counts.items() if n == top)
    name = "majority " + " / ".join(shown(a) for a in tied)
    how = (f"always {' or '.join(shown(a) for a in tied)}, the most frequent answer of the {len(train_answers)} "
           f"training examples ({f'{top} each, tied: the mean of picking either' if len(tied) > 1 else f'{top} of them'})")
    return Floor(name, how, {e["key"]: sum(score(a, e) for a in tied) / len(tied) for e in test})


@dataclass(frozen=True)
class PipelineFloors:
    floors: tuple[Floor, ...]
    groups: dict[str, str]             # test example key -> subgroup ('' when the pipeline has none)
    reason: str = ""                   # why there are no floors (no floors module, no traces, no data)
    declared: bool = True              # the pipeline has a floors module (a toy pipeline may have none)

    @property
    def defined(self) -> list[Floor]:
        return [f for f in self.floors if f.scores]

    def best(self, keys: list[str] | None = None) -> Floor | None:
        """The highest defined floor on `keys` (every example when None)."""
        scored = [(mean_on(f, keys), f) for f in self.defined]
        scored = [(m, f) for m, f in scored if m is not None]
        return max(scored, key=lambda pair: pair[0])[1] if scored else None


def mean_on(floor: Floor, keys: list[str] | None) -> float | None:
    if not floor.scores:
        return None
    values = [floor.scores[k] for k in (keys if keys is not None else floor.scores) if k in floor.scores]
    return sum(values) / len(values) if values else None


def floors_module(pipeline: str, target: str | None = None):
    """optimas_pipelines/<pipeline>/floors.py, else the floors.py beside the build() the runs were made with
    (`target`, their pipeline._target_: a pipeline=dspy run is named after its program, dspy_<module>)."""
    packages = [f"optimas_pipelines.{pipeline}"]
    if target and target.startswith("optimas_pipelines.") and target.rpartition(".")[0] not in packages:
        packages.append(target.rpartition(".")[0])
    for package in packages:
        try:
            return importlib.import_module(f"{package}.floors")
        except ModuleNotFoundError as exc:
            if exc.name not in (f"{package}.floors", package, "optimas_pipelines"):
                raise
    return None


def _target(config: dict) -> str | None:
    return (config.get("pipeline") or {}).get("_target_")


def pipeline_floors(runs: list[Run]) -> PipelineFloors:
    """The floors of the runs' pipeline on the test examples they scored (the first traced run's, which every
    run of a pipeline shares), learned from the smallest training split any of them saw."""
    module = floors_module(runs[0].pipeline, _target(runs[0].results.get("config") or {}))
    if module is None:
        return PipelineFloors((), {}, f"none declared (no pipelines/{runs[0].pipeline}/floors.py)", declared=False)
    traced = sorted((r for r in runs if predictions_path(r.files) is not None), key=lambda r: str(r.folder))
    if not traced:
        return PipelineFloors((), {}, "no run has per-example traces (predictions.jsonl.gz)")
    configs = [r.results.get("config") or {} for r in runs]
    sizes = [((c.get("budget") or {}).get("train_size")) for c in configs]
    config = configs[min(range(len(sizes)), key=lambda i: float("inf") if sizes[i] is None else sizes[i])]
    return _computed(runs[0].pipeline, str(traced[0].files), json.dumps(config, sort_keys=True, default=str))


@lru_cache(maxsize=32)
def _computed(pipeline: str, folder: str, config_json: str) -> PipelineFloors:
    config = json.loads(config_json)
    module = floors_module(pipeline, _target(config))
    data_dir = config.get("data_dir")
    if data_dir and not Path(data_dir).exists():  # a run folder moved from another machine: use $OPTIMAS_DATA_DIR
        config["data_dir"] = None
    try:
        test = test_examples(Path(folder))
    except UserError as exc:
        return PipelineFloors((), {}, f"test examples not readable: {exc.problem}")
    try:
        found = module.floors(module.train_examples(config), list(test.values()), config)
    except (UserError, OSError) as exc:
        problem = getattr(exc, "problem", None) or str(exc)
        return PipelineFloors((), {}, f"the pipeline's data is not available ({problem})")
    group = getattr(module, "group", None)
    groups = {key: (group(example) if group else "") for key, example in test.items()}
    return PipelineFloors(tuple(found), groups)


def test_examples(folder: Path) -> dict[str, dict]:
    """key -> the test example as the run scored it: its system inputs and gold fields, one per key."""
    out: dict[str, dict] = {}
    for line in read_predictions(predictions_path(folder)):
        if line["split"] == "test" and line["key"] not in out:
            out[line["key"]] = {**(line.get("input") or {}), **(line.get("gold") or {}), "key": line["key"]}
    return out


@dataclass(frozen=True)
class FloorCheck:
    """Whether runs (seeds) beat each floor on the same test examples, and the verdict gate that follows."""

    floors: PipelineFloors
    against: dict[str, Comparison]     # floor name -> runs minus floor (paired, seeds resampled)
    best: Floor | None

    @property
    def blocks(self) -> str:
        """Why no verdict may be printed ('' when one may): below the best floor, or floors not computable."""
        if self.floors.reason and self.floors.declared:
            return f"no verdict: floors not computed ({self.floors.reason})"
        if self.best is None:
            return ""
        comparison = self.against.get(self.best.name)
        if comparison is None:
            return f"no verdict: not compared with the floor {self.best.name} ({self.best.mean:.4f}): no traces"
        if not comparison.above_zero:
            return f"below floor: {self.best.name} ({mean_on(self.best, list(self.floors.groups) or None):.4f})"
        return ""


def check(members: list[Run], floors: PipelineFloors | None = None) -> FloorCheck:
    """The members (one cell's seeds) against each defined floor of their pipeline."""
    floors = floors or pipeline_floors(members)
    rows = seed_scores(members)
    against = {}
    if rows is not None:
        for floor in floors.defined:
            comparison = compare(rows, [floor.scores] * len(rows))
            if comparison is not None:
                against[floor.name] = comparison
    return FloorCheck(floors, against, floors.best())
