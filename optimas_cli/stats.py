"""Bootstrap statistics over per-example scores: how sure a mean or a paired difference is.

Percentile bootstrap with a seeded numpy generator, so a report or a gate decision is the same
every time it is computed. Examples are the unit of resampling (they are what varies between
validation and test); when several runs (seeds) of one experiment exist, runs are resampled too.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

N_BOOT = 2000
# The largest per-example sd of a gain between two uncorrelated systems whose scores lie in [0, 1].
WORST_CASE_SD = math.sqrt(0.5)


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0


def _array(values: Sequence[float], what: str) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{what}: need a non-empty list of numbers, got shape {arr.shape}")
    return arr


def _boot_means(values: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    return values[rng.integers(0, values.size, size=(n_boot, values.size))].mean(axis=1)


def mean_ci(values: Sequence[float], level: float = 0.95, n_boot: int = N_BOOT, seed: int = 0) -> Interval:
    """Two-sided percentile bootstrap CI of the mean over examples."""
    arr = _array(values, "mean_ci")
    means = _boot_means(arr, n_boot, np.random.default_rng(seed))
    tail = (1 - level) / 2
    return Interval(float(arr.mean()), float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail)))


def mean_ci_over_runs(runs: Sequence[Sequence[float]], level: float = 0.95, n_boot: int = N_BOOT,
                      seed: int = 0) -> Interval:
    """CI of the grand mean when several runs (seeds) each scored their examples: resample the runs,
    then each drawn run's examples (a two-level bootstrap), so seed-to-seed spread widens the CI."""
    arrays = [_array(r, "mean_ci_over_runs") for r in runs]
    if len(arrays) == 1:
        return mean_ci(arrays[0], level, n_boot, seed)
    rng = np.random.default_rng(seed)
    k = len(arrays)
    # example-level bootstrap means, one independent draw per (replicate, slot) for every run
    per_run = np.stack([_boot_means(a, n_boot * k, rng).reshape(n_boot, k) for a in arrays])  # (runs, B, k)
    picks = rng.integers(0, k, size=(n_boot, k))
    means = per_run[picks, np.arange(n_boot)[:, None], np.arange(k)[None, :]].mean(axis=1)
    tail = (1 - level) / 2
    grand = float(np.mean([a.mean() for a in arrays]))
    return Interval(grand, float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail)))


def paired_ci(before: Sequence[float], after: Sequence[float], level: float = 0.95, n_boot: int = N_BOOT,
              seed: int = 0) -> Interval:
    """Two-sided CI of mean(after - before) over the same examples (paired bootstrap)."""
    a, b = _array(before, "paired_ci before"), _array(after, "paired_ci after")
    if a.size != b.size:
        raise ValueError(f"paired_ci: {a.size} scores before but {b.size} after; pair them on the same examples")
    return mean_ci(b - a, level, n_boot, seed)


def paired_lower_bound(before: Sequence[float], after: Sequence[float], alpha: float, n_boot: int = N_BOOT,
                       seed: int = 0) -> Interval:
    """One-sided paired bootstrap at level alpha: `low` is the bound the mean gain exceeds with
    confidence 1 - alpha; `high` is the matching upper bound (together a 1 - 2*alpha interval)."""
    return paired_ci(before, after, level=1 - 2 * alpha, n_boot=n_boot, seed=seed)


def detectable_effect(scores: Sequence[float], alpha: float, n_boot: int = N_BOOT, seed: int = 0) -> float:
    """The smallest mean per-example gain whose one-sided lower bound (level alpha) clears 0, if the
    per-example gains were as spread as these scores: the bootstrap margin mean - q_alpha(means)."""
    arr = _array(scores, "detectable_effect")
    means = _boot_means(arr, n_boot, np.random.default_rng(seed))
    return float(arr.mean() - np.quantile(means, alpha))


def minimum_detectable_effect(n: int, sd: float = WORST_CASE_SD, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest true mean gain a two-sided test at level `alpha` finds with probability `power` on n
    paired examples whose per-example gains have standard deviation `sd`: (z_{1-alpha/2} + z_power) sd / sqrt(n).
    The default sd is the worst case of two uncorrelated systems scored in [0, 1] (each sd at most 0.5),
    which is the textbook two-proportion size at p = 0.5; a measured sd of paired gains replaces it."""
    if n < 1:
        raise ValueError(f"minimum_detectable_effect: need at least one example, got n={n}")
    z = NormalDist()
    return (z.inv_cdf(1 - alpha / 2) + z.inv_cdf(power)) * sd / math.sqrt(n)


def mde_summary(n: int, paired_gains: Sequence[float] | None = None, alpha: float = 0.05, power: float = 0.8) -> dict:
    """What results.json records for a split: its size, the worst-case MDE and, given the per-example
    gains of a paired comparison, the MDE at their measured spread."""
    out = {"n": n, "alpha": alpha, "power": power, "worst_case_sd": WORST_CASE_SD,
           "mde_worst_case": round(minimum_detectable_effect(n, WORST_CASE_SD, alpha, power), 4)}
    if paired_gains is not None and len(paired_gains) > 1:
        sd = float(np.std(np.asarray(paired_gains, dtype=float), ddof=1))
        out.update(measured_sd=round(sd, 4), mde_measured=round(minimum_detectable_effect(n, sd, alpha, power), 4))
    return out
