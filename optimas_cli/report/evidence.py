"""How sure each Table 2 number is: bootstrap CIs from the runs' per-example test scores.

A run's per-example scores come from its predictions.jsonl.gz (the mean over repeats per example).
Repeats that produced the same outputs (greedy decoding) count as one effective repeat: their
std of 0 measures nothing. Runs written before traces existed get no CI, and say why.
"""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from optimas_cli.errors import UserError
from optimas_cli.report.runs import Run
from optimas_cli.stats import Interval, mean_ci_over_runs, paired_ci
from optimas_cli.system.traces import PREDICTIONS, predictions_path, read_predictions

BASELINE = "unoptimized"


@dataclass(frozen=True)
class RunScores:
    by_key: dict[str, float]  # per-example test score, averaged over repeats
    repeats: int
    effective: int            # distinct repeats: repeats with identical outputs count once


@dataclass
class CellEvidence:
    ci: Interval | None = None
    examples: int = 0
    repeats: int = 0
    effective: int | None = None
    paired: Interval | None = None  # mean(method - unoptimized) on the examples both scored
    paired_n: int = 0
    reason: str = ""                # why ci (or paired) is n/a


@lru_cache(maxsize=256)
def _scores(folder: str) -> RunScores | str:
    path = predictions_path(Path(folder))
    if path is None:
        return f"no {PREDICTIONS} (a run from before per-example traces)"
    try:
        lines = [r for r in read_predictions(path) if r["split"] == "test"]
    except UserError as exc:  # damaged: cut short, not UTF-8, not JSON, a field of the wrong type
        return exc.problem.replace(str(path), path.name)
    if not lines:
        return f"{path.name} holds no test examples"
    by_key: dict[str, list[float]] = {}
    outputs: dict[int, list] = {}
    for r in lines:
        by_key.setdefault(r["key"], []).append(float(r["score"]))
        outputs.setdefault(int(r["repeat"]), []).append((r["key"], json.dumps(r["output"], sort_keys=True, default=str)))
    distinct = {tuple(sorted(v)) for v in outputs.values()}
    return RunScores({k: statistics.fmean(v) for k, v in by_key.items()}, len(outputs), len(distinct))


def run_scores(run: Run) -> RunScores | str:
    """The run's per-example test scores, or the reason there are none."""
    return _scores(str(run.folder))


def _pooled(members: list[RunScores]) -> dict[str, float]:
    """Per-example mean over several runs (seeds), on the examples every run scored."""
    keys = [k for k in members[0].by_key if all(k in m.by_key for m in members)]
    return {k: statistics.fmean(m.by_key[k] for m in members) for k in keys}


def pooled_scores(runs: list[Run]) -> dict[str, float] | None:
    """Per-example test score averaged over the runs (seeds), on the examples all scored; None when a run
    has no per-example traces."""
    scores = [run_scores(r) for r in runs]
    return None if any(isinstance(s, str) for s in scores) else _pooled(scores)  # type: ignore[arg-type]


def cell_evidence(members: list[Run], baseline: list[Run] | None) -> CellEvidence:
    scores = [run_scores(r) for r in members]
    missing = [s for s in scores if isinstance(s, str)]
    if missing:
        where = missing[0] if len(members) == 1 else f"{len(missing)} of {len(members)} runs: {missing[0]}"
        return CellEvidence(reason=f"CI n/a: {where}")
    have: list[RunScores] = scores  # type: ignore[assignment]
    out = CellEvidence(
        ci=mean_ci_over_runs([list(s.by_key.values()) for s in have]),
        examples=len(_pooled(have)),
        repeats=sum(s.repeats for s in have),
        effective=sum(s.effective for s in have),
    )
    if baseline is None or members[0].method == BASELINE:
        return out
    base = [run_scores(r) for r in baseline]
    if any(isinstance(s, str) for s in base):
        out.reason = "paired Δ n/a: the Unoptimized run has no per-example traces"
        return out
    ours, theirs = _pooled(have), _pooled(base)  # type: ignore[arg-type]
    common = [k for k in ours if k in theirs]
    if not common:
        out.reason = "paired Δ n/a: no test example in common with Unoptimized"
        return out
    out.paired = paired_ci([theirs[k] for k in common], [ours[k] for k in common])
    out.paired_n = len(common)
    return out
