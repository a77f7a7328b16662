"""Bootstrap statistics on cases that can be checked by hand, and the CI's coverage on seeded samples."""
from __future__ import annotations

import numpy as np
import pytest

from optimas_cli.stats import detectable_effect, mean_ci, mean_ci_over_runs, paired_ci, paired_lower_bound


def test_constant_differences_give_a_point_interval():
    before = [0.2, 0.5, 0.9, 0.0]
    ci = paired_ci(before, [b + 0.1 for b in before])
    assert (ci.estimate, ci.low, ci.high) == pytest.approx((0.1, 0.1, 0.1))
    assert ci.excludes_zero
    constant = mean_ci([0.3] * 7)
    assert (constant.low, constant.high) == pytest.approx((0.3, 0.3))


def test_no_difference_does_not_exclude_zero():
    ci = paired_ci([0.0, 1.0, 0.5], [0.0, 1.0, 0.5])
    assert (ci.estimate, ci.low, ci.high) == (0.0, 0.0, 0.0) and not ci.excludes_zero


def test_one_gain_among_ten_examples_is_not_evidence():
    # 9 ties and one +1: a resample misses that example with probability 0.9**10 = 0.35 > alpha,
    # so the one-sided lower bound at alpha = 0.1 is exactly 0; at alpha = 0.4 it is above 0.
    before = [0.0] * 10
    after = [1.0] + [0.0] * 9
    assert paired_lower_bound(before, after, alpha=0.1).low == 0.0
    assert paired_lower_bound(before, after, alpha=0.4).low > 0.0
    assert paired_lower_bound(before, after, alpha=0.1).estimate == pytest.approx(0.1)


def test_95_percent_ci_covers_the_true_mean_about_95_percent_of_the_time():
    rng = np.random.default_rng(0)
    samples = [rng.normal(0.5, 1.0, 40) for _ in range(300)]
    hits = sum(ci.low <= 0.5 <= ci.high for ci in (mean_ci(s, n_boot=400, seed=i) for i, s in enumerate(samples)))
    assert 0.89 <= hits / 300 <= 0.99


def test_the_detectable_effect_shrinks_with_the_square_root_of_the_examples():
    rng = np.random.default_rng(1)
    scores = rng.uniform(0, 1, 25)
    small = detectable_effect(scores, alpha=0.1)
    large = detectable_effect(np.tile(scores, 4), alpha=0.1)  # same spread, 4x the examples
    normal = 1.2816 * scores.std() / np.sqrt(scores.size)  # z_0.9 * standard error
    assert small == pytest.approx(normal, rel=0.15)
    assert large / small == pytest.approx(0.5, rel=0.15)
    assert detectable_effect([0.4] * 10, alpha=0.1) == pytest.approx(0.0)


def test_seed_spread_widens_the_interval_over_runs():
    rng = np.random.default_rng(2)
    runs = [rng.normal(mu, 0.1, 30) for mu in (0.2, 0.5, 0.8)]
    pooled = mean_ci(np.concatenate(runs))
    over_runs = mean_ci_over_runs(runs)
    assert over_runs.estimate == pytest.approx(0.5, abs=0.05)
    assert over_runs.high - over_runs.low > 2 * (pooled.high - pooled.low)
    assert mean_ci_over_runs([runs[0]]) == mean_ci(runs[0])


def test_mismatched_pairs_are_refused():
    with pytest.raises(ValueError, match="same examples"):
        paired_ci([1.0, 2.0], [1.0])
