"""The minimum detectable effect every run logs (issue 24): the power formula and where runs record it."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from rich.console import Console

from optimas_cli.conf import CONF_DIR
from optimas_cli.flows.run import run
from optimas_cli.stats import WORST_CASE_SD, mde_summary, minimum_detectable_effect
from optimas_cli.system.run_folder import RunFolder


def test_mde_is_the_textbook_two_proportion_size():
    # (z_0.975 + z_0.8) * sd / sqrt(n) = (1.95996 + 0.84162) * 0.5 / 10
    assert minimum_detectable_effect(100, sd=0.5) == pytest.approx(0.14008, abs=1e-5)
    # Two proportions at p = 0.5 need n = 98 per arm to detect 0.2 at 80% power, alpha 0.05.
    assert minimum_detectable_effect(98) == pytest.approx(0.2, abs=0.002)
    assert WORST_CASE_SD == pytest.approx(math.sqrt(0.25 + 0.25))
    assert minimum_detectable_effect(400) == pytest.approx(minimum_detectable_effect(100) / 2)
    with pytest.raises(ValueError):
        minimum_detectable_effect(0)


def test_a_true_gain_of_the_mde_is_found_80_percent_of_the_time():
    rng = np.random.default_rng(0)
    n, sd = 60, 0.4
    effect = minimum_detectable_effect(n, sd)
    gains = rng.normal(effect, sd, size=(20000, n))
    z = gains.mean(axis=1) / (sd / math.sqrt(n))
    assert np.mean(np.abs(z) > 1.959964) == pytest.approx(0.8, abs=0.01)


def test_mde_summary_adds_the_measured_spread_of_paired_gains():
    out = mde_summary(4, [0.0, 1.0, 0.0, 1.0])
    assert out["n"] == 4 and out["mde_worst_case"] == round(minimum_detectable_effect(4), 4)
    assert out["measured_sd"] == round(float(np.std([0, 1, 0, 1], ddof=1)), 4)
    assert "mde_measured" not in mde_summary(4)


def test_every_run_records_its_splits_mde(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["pipeline=toy_retriever", "method=unoptimized", "budget=smoke"])
    results = run(cfg, RunFolder(tmp_path / "run"), Console(quiet=True))
    n_val, n_test = results["splits"]["val"], results["splits"]["test"]
    assert results["mde"]["validation"]["mde_worst_case"] == round(minimum_detectable_effect(n_val), 4)
    assert results["mde"]["test"]["n"] == n_test
