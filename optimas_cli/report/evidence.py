"""How sure each Table 2 number is: bootstrap CIs from the runs' per-example test scores.

Seeds are never extra examples: several runs of one cell are resampled as runs over the same examples
(stats.mean_ci_over_runs), and a t-interval over the seeds' own means says what the seeds agree on.
A gain is measured seed by seed against the Unoptimized run of the same seed, else the run's own
initial configuration on the same test examples.

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
from optimas_cli.stats import Interval, mean_ci_over_runs, seed_interval
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
    seeds: Interval | None = None   # t-interval over the runs' own means (None with one run)
    paired: Comparison | None = None  # method minus Unoptimized (or each run's initial configuration)
    paired_n: int = 0
    paired_against: str = ""        # what the paired Δ was taken against
    reason: str = ""                # why ci (or paired) is n/a


@dataclass(frozen=True)
class Comparison:
    """A mean difference over runs (seeds) on the same examples: a two-level bootstrap CI (examples, then
    seeds) and, with several seeds, the t-interval over the seeds' own mean differences."""

    boot: Interval
    seeds: Interval | None
    n: int

    @property
    def estimate(self) -> float:
        return self.boot.estimate

    @property
    def low(self) -> float:
        return self.boot.low

    @property
    def high(self) -> float:
        return self.boot.high

    @property
    def excludes_zero(self) -> bool:
        return self.boot.excludes_zero

    @property
    def above_zero(self) -> bool:
        """Shown above 0 by both intervals: a claim across seeds needs the seeds to agree, not only the examples."""
        return self.boot.low > 0 and (self.seeds is None or self.seeds.low > 0)

    def text(self) -> str:
        seeds = "" if self.seeds is None else f"; seeds [{self.seeds.low:+.4f}, {self.seeds.high:+.4f}]"
        return f"{self.estimate:+.4f} [{self.low:+.4f}, {self.high:+.4f}]{seeds}"


def compare(rows: list[dict[str, float]], baselines: list[dict[str, float]]) -> Comparison | None:
    """rows[i] minus baselines[i] per example, on the examples every row and baseline scored; None when
    they share none."""
    keys = [k for k in rows[0] if all(k in r for r in rows) and all(k in b for b in baselines)]
    if not keys:
        return None
    diffs = [[row[k] - base[k] for k in keys] for row, base in zip(rows, baselines, strict=True)]
    return Comparison(mean_ci_over_runs(diffs), seed_interval([statistics.fmean(d) for d in diffs]), len(keys))


@lru_cache(maxsize=512)
def _scores(folder: str, split: str = "test") -> RunScores | str:
    path = predictions_path(Path(folder))
    if path is None:
        return f"no {PREDICTIONS} (a run from before per-example traces)"
    try:
        lines = [r for r in read_predictions(path) if r["split"] == split]
    except UserError as exc:  # damaged: cut short, not UTF-8, not JSON, a field of the wrong type
        return exc.problem.replace(str(path), path.name)
    if not lines:
        return f"{path.name} holds no {split} examples"
    by_key: dict[str, list[float]] = {}
    outputs: dict[int, list] = {}
    for r in lines:
        by_key.setdefault(r["key"], []).append(float(r["score"]))
        outputs.setdefault(int(r["repeat"]), []).append((r["key"], json.dumps(r["output"], sort_keys=True, default=str)))
    distinct = {tuple(sorted(v)) for v in outputs.values()}
    return RunScores({k: statistics.fmean(v) for k, v in by_key.items()}, len(outputs), len(distinct))


def run_scores(run: Run, split: str = "test") -> RunScores | str:
    """The run's per-example scores on a split (test, or test_initial: its initial configuration on the
    same test examples), or the reason there are none."""
    return _scores(str(run.files), split)


def _common(members: list[RunScores]) -> list[str]:
    return [k for k in members[0].by_key if all(k in m.by_key for m in members)]


def _pooled(members: list[RunScores]) -> dict[str, float]:
    """Per-example mean over several runs (seeds), on the examples every run scored."""
    return {k: statistics.fmean(m.by_key[k] for m in members) for k in _common(members)}


def pooled_scores(runs: list[Run]) -> dict[str, float] | None:
    """Per-example test score averaged over the runs (seeds), on the examples all scored; None when a run
    has no per-example traces."""
    scores = [run_scores(r) for r in runs]
    return None if any(isinstance(s, str) for s in scores) else _pooled(scores)  # type: ignore[arg-type]


def seed_scores(runs: list[Run]) -> list[dict[str, float]] | None:
    """Each run's per-example test scores; None when a run has no per-example traces."""
    scores = [run_scores(r) for r in runs]
    return None if any(isinstance(s, str) for s in scores) else [s.by_key for s in scores]  # type: ignore[union-attr]


def baseline_for(run: Run, baseline: list[Run] | None) -> tuple[dict[str, float] | None, str]:
    """What a run's gain is measured against: the Unoptimized run of its seed; else its own initial
    configuration scored on the same test examples (results.json's test_initial, traced as split
    test_initial); else the Unoptimized runs' per-example mean. (None, why) when there is none."""
    seed = (run.results.get("config") or {}).get("seed")
    same_seed = [b for b in baseline or [] if (b.results.get("config") or {}).get("seed") == seed]
    if same_seed and not isinstance(scores := run_scores(same_seed[0]), str):
        return scores.by_key, "Unoptimized"
    initial = run_scores(run, "test_initial")
    if not isinstance(initial, str):
        return initial.by_key, "initial config"
    pooled = pooled_scores(baseline) if baseline else None
    if pooled:
        return pooled, "Unoptimized"
    return None, ("the Unoptimized run has no per-example traces" if baseline
                  else "no Unoptimized run and no traced initial configuration")


def cell_evidence(members: list[Run], baseline: list[Run] | None) -> CellEvidence:
    scores = [run_scores(r) for r in members]
    missing = [s for s in scores if isinstance(s, str)]
    if missing:
        where = missing[0] if len(members) == 1 else f"{len(missing)} of {len(members)} runs: {missing[0]}"
        return CellEvidence(reason=f"CI n/a: {where}")
    have: list[RunScores] = scores  # type: ignore[assignment]
    keys = _common(have)
    out = CellEvidence(
        ci=mean_ci_over_runs([[s.by_key[k] for k in keys] for s in have]),
        seeds=seed_interval([statistics.fmean(s.by_key[k] for k in keys) for s in have]),
        examples=len(keys),
        repeats=sum(s.repeats for s in have),
        effective=sum(s.effective for s in have),
    )
    if members[0].method == BASELINE:
        return out
    against = [baseline_for(r, baseline) for r in members]
    if any(b is None for b, _ in against):
        out.reason = f"paired Δ n/a: {next(why for b, why in against if b is None)}"
        return out
    out.paired = compare([s.by_key for s in have], [b for b, _ in against])  # type: ignore[misc]
    if out.paired is None:
        out.reason = "paired Δ n/a: no test example in common with Unoptimized"
        return out
    out.paired_n = out.paired.n
    out.paired_against = " / ".join(dict.fromkeys(why for _, why in against))
    return out
