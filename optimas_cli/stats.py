"""Bootstrap statistics over per-example scores: how sure a mean or a paired difference is.

Percentile bootstrap with a seeded numpy generator, so a report or a gate decision is the same
every time it is computed. Examples are the unit of resampling (they are what varies between
validation and test); when several runs (seeds) of one experiment scored the same examples, the
examples are resampled once per draw and the runs on top (seeds never count as extra examples), and
`seed_interval` gives the interval over the seeds' own means.
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
    """CI of the grand mean when several runs (seeds) scored the SAME examples, row i of every run being
    example i: each draw resamples the examples once (they are shared, so one draw serves every run) and
    then the runs with replacement (a two-level bootstrap). Seed-to-seed spread widens the CI, and runs
    that scored alike add nothing: k identical runs give exactly the one-run interval."""
    arrays = [_array(r, "mean_ci_over_runs") for r in runs]
    if not arrays or len({a.size for a in arrays}) != 1:
        raise ValueError("mean_ci_over_runs: need runs of equally many examples (the same examples, aligned)")
    matrix = np.stack(arrays)
    k, n = matrix.shape
    rng = np.random.default_rng(seed)
    examples = rng.integers(0, n, size=(n_boot, n))  # drawn first, so one run matches mean_ci's draws
    picks = rng.integers(0, k, size=(n_boot, k))
    per_example = matrix[picks].mean(axis=1)  # (n_boot, n): each draw's runs averaged per example
    means = np.take_along_axis(per_example, examples, axis=1).mean(axis=1)
    tail = (1 - level) / 2
    return Interval(float(matrix.mean()), float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail)))


def seed_interval(run_means: Sequence[float], level: float = 0.95) -> Interval | None:
    """Student-t interval over the runs' (seeds') own means: what a claim across seeds can say, each seed
    one observation. None for a single run, which says nothing about seed-to-seed spread."""
    arr = _array(run_means, "seed_interval")
    if arr.size < 2:
        return None
    half = t_quantile(1 - (1 - level) / 2, arr.size - 1) * float(arr.std(ddof=1)) / math.sqrt(arr.size)
    return Interval(float(arr.mean()), float(arr.mean()) - half, float(arr.mean()) + half)


def t_quantile(p: float, df: int) -> float:
    """Quantile of Student's t with df degrees of freedom (p > 0.5): bisection on its CDF, the density
    integrated by Simpson's rule (no scipy in the environment)."""
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def cdf(x: float) -> float:
        grid = np.linspace(0.0, x, 4001)
        density = np.exp(log_norm - (df + 1) / 2 * np.log1p(grid ** 2 / df))
        h = grid[1] - grid[0]
        return 0.5 + h / 3 * float(density[0] + density[-1] + 4 * density[1:-1:2].sum() + 2 * density[2:-1:2].sum())

    low, high = 0.0, 1.0
    while cdf(high) < p:
        high *= 2
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if cdf(mid) < p else (low, mid)
    return (low + high) / 2


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
