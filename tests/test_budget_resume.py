"""Hard caps and resume on the toy retriever (deterministic; the LRF judge calls a priced mock API model,
so tokens and dollars are counted too): a capped run stops cleanly and, resumed with a raised cap, ends
with the results of an uncapped run; so does a run killed at any phase boundary and resumed."""
from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from rich.console import Console

from optimas_cli.conf import CONF_DIR
from optimas_cli.errors import UserError
from optimas_cli.flows.run import run
from optimas_cli.methods.base import Method
from optimas_cli.system.caps import BudgetCaps, BudgetExhausted
from optimas_cli.system.results_file import read_results
from optimas_cli.system.run_folder import RunFolder
from tests.test_lrf_tiny_backbone import build_tiny_bert

pytestmark = pytest.mark.real_model
QUIET = Console(quiet=True)


class Killed(BaseException):
    """A kill: not an Exception, so nothing on the way up handles it."""


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    return build_tiny_bert(tmp_path_factory.mktemp("bert"))


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")  # the mock API model needs none, litellm checks


def composed(tiny_bert, cache_dir, *overrides):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=[
            "pipeline=toy_retriever", "method=optimas", "budget=smoke", "budget.train_size=null", "budget.val_size=null",
            "budget.test_size=null", f"lrf.backbone={tiny_bert}", "lrf.max_length=120", "lrf.min_steps=20",
            "lm=openai", "+lm.mock_response=B", f"lm.cache_dir={cache_dir}", "repeats=1",
            "lrf.min_test_pairs=0",  # a test split on the toy, so the judge calls the (priced) LM
            "method.adaptation=paper",  # the toy's one choice has no context to change: lazy would never adapt
            *overrides])


def run_in(tiny_bert, path, *overrides):
    # Each run folder has its own call cache: another folder's rows would be (correctly) free hits.
    folder = RunFolder(path / "run")
    folder.lock()  # as `optimas run` does: the folder's writer first recovers its last checkpoint
    try:
        return run(composed(tiny_bert, path / "cache", *overrides), folder, QUIET)
    finally:
        folder.unlock()


def essentials(results: dict) -> dict:
    ledger = results["ledger"]
    return {
        "test": results.get("test"), "validation": results.get("validation"), "history": results["history"],
        "best_config": results["best_config"],
        "adaptations": [{k: v for k, v in a.items() if k != "seconds"} for a in results.get("adaptations", [])],
        "runs": ledger["runs"], "calls": ledger["calls"], "tokens": ledger["tokens"], "usd": ledger["usd"],
        "runs_by_phase": {p: row["runs"] for p, row in ledger["by_phase"].items() if row["runs"]},
    }


@pytest.fixture(scope="module")
def uncapped(tiny_bert, tmp_path_factory):
    results = run_in(tiny_bert, tmp_path_factory.mktemp("uncapped"))
    assert results["adaptations"] and results["ledger"]["tokens"] > 0 and results["ledger"]["usd"] > 0
    return results


def test_a_cap_stops_the_run_and_a_raised_cap_resumes_it_to_the_uncapped_result(tiny_bert, tmp_path, uncapped):
    # reached exactly by iteration 1: the loop stops at the next safe point, before iteration 2
    cap = uncapped["history"][0]["runs_so_far"]
    stopped = run_in(tiny_bert, tmp_path, f"budget.max_runs={cap}")
    assert stopped["stopped"] == "max_runs" and len(stopped["history"]) == 1
    assert stopped["test"]["n"] > 0  # max_runs caps the optimization: the best so far is still evaluated
    assert read_results(tmp_path / "run")["stopped"] == "max_runs"

    resumed = run_in(tiny_bert, tmp_path, "budget.max_runs=null")
    assert "stopped" not in resumed
    assert essentials(resumed) == essentials(uncapped)


def test_a_dollar_cap_forbids_the_test_evaluation_and_says_so(tiny_bert, tmp_path, uncapped):
    stopped = run_in(tiny_bert, tmp_path, "budget.max_usd=1e-9")  # reached by the LRF judge's first calls
    assert stopped["stopped"] == "max_usd" and "test" not in stopped and "validation" not in stopped
    assert "max_usd" in stopped["test_skipped"] and "raised cap" in stopped["test_skipped"]
    resumed = run_in(tiny_bert, tmp_path, "budget.max_usd=100")
    assert essentials(resumed) == essentials(uncapped)


def optimization_runs(results: dict) -> float:
    """The runs a max_runs cap counts: everything before the final validation and test."""
    after = ("final_validation", "test", "test_initial")
    return sum(row["runs"] for phase, row in results["ledger"]["by_phase"].items() if phase not in after)


# Issue 26 item 11: 10 stopped at 20 (the loop's opening validation ran before the first check), 30 at 50
# (a whole iteration); now a unit whose runs are known (a validation pass, the search sample's re-run) is
# not started when it would cross the cap. A stop inside an iteration resumes to the uncapped result.
@pytest.mark.parametrize("cap", [10, 30])
def test_a_runs_cap_is_not_crossed_by_a_unit_of_known_size(tiny_bert, tmp_path, uncapped, cap):
    # Stage 1 at its uncapped size (a cap otherwise sizes it, and a resume keeps that size: test_stage1_share.py)
    whole = "lrf.collect.cap_share=null"
    stopped = run_in(tiny_bert, tmp_path, f"budget.max_runs={cap}", whole)
    assert stopped["stopped"] == "max_runs" and optimization_runs(stopped) <= cap, stopped["ledger"]["by_phase"]
    resumed = run_in(tiny_bert, tmp_path, "budget.max_runs=null", whole)
    assert essentials(resumed) == essentials(uncapped)


def test_a_cap_that_stage2_would_cross_stops_before_it(tiny_bert, tmp_path, uncapped):
    """Iteration 1 is accepted; iteration 2 starts with its adaptation: Stage 2's collection, then its routes
    re-validated. A cap inside that adaptation stops the run before it (optimas plan's arithmetic predicts its
    runs), not up to a whole adaptation past the cap. The accepted update is kept, the history says the adaptation
    was skipped, and a resume with a raised cap runs it and ends as the uncapped run."""
    first = uncapped["history"][0]
    assert first["accepted"] and uncapped["adaptations"]
    stage2 = uncapped["ledger"]["by_phase"]["adaptation"]["runs"] / len(uncapped["adaptations"])
    cap = first["runs_so_far"] + stage2 / 2
    stopped = run_in(tiny_bert, tmp_path, f"budget.max_runs={cap}")
    assert stopped["stopped"] == "max_runs" and optimization_runs(stopped) <= cap, (stopped["ledger"]["by_phase"], stopped["history"])
    assert not stopped["ledger"]["by_phase"].get("adaptation", {}).get("runs")
    assert len(stopped["history"]) == 1 and stopped["history"][0]["accepted"]
    assert stopped["history"][0]["details"]["adaptation"]["note"].startswith("skipped")
    assert stopped["history"][0]["proposal"] == first["proposal"]
    resumed = run_in(tiny_bert, tmp_path, "budget.max_runs=null")
    assert essentials(resumed) == essentials(uncapped)


def test_a_dollar_cap_stops_lrf_training_after_an_epoch(tiny_bert, tmp_path, uncapped, monkeypatch):
    """Compute is priced per hour; before, Stage 1 trained all its epochs before the first check."""
    import optimas_cli.lrf.train as train

    steps, real = [], train._step
    monkeypatch.setattr(train, "_step", lambda *args: steps.append(1) or real(*args))
    stopped = run_in(tiny_bert, tmp_path, "budget.max_usd=1e-9", "compute.price_per_hour=100000")
    stage1 = uncapped["lrf"]["stage1"]
    per_epoch = stage1["steps"] // stage1["epochs_run"]
    assert stopped["stopped"] == "max_usd" and stage1["epochs_run"] > 1
    # at most one epoch (here none: the dev pass before the first epoch already crossed 1e-9 dollars); before: all 3
    assert len(steps) <= per_epoch < stage1["steps"]


def kill_at_checkpoint(monkeypatch, n: int):
    """Kill the run as it is about to write its n-th checkpoint: the work since the previous one is done,
    but neither recorded nor marked done."""
    real, seen = RunFolder.checkpoint, []

    def checkpoint(self, ctx, files=None):
        seen.append(1)
        if len(seen) == n:
            raise Killed
        real(self, ctx, files)

    monkeypatch.setattr(RunFolder, "checkpoint", checkpoint)


def kill_in_test(monkeypatch, n: int):
    real = Method.evaluate

    def evaluate(self, pipeline, outcome, examples, ctx, repeats):
        result = real(self, pipeline, outcome, examples, ctx, repeats)
        if ctx.phase == "test":
            raise Killed
        return result

    monkeypatch.setattr(Method, "evaluate", evaluate)


# Checkpoints of the toy run: 1 the retriever's pairs, 2 Stage 1's LRF, 3 the loop's opening validation,
# 4 iteration 1 (accepted), 5 iteration 2 (Stage 2 adaptation first); then the test evaluation.
@pytest.mark.parametrize("kill, n", [(kill_at_checkpoint, n) for n in (1, 2, 3, 4, 5)] + [(kill_in_test, 0)])
def test_a_run_killed_at_a_phase_boundary_and_resumed_equals_an_uninterrupted_run(tiny_bert, tmp_path, uncapped,
                                                                               monkeypatch, kill, n):
    with monkeypatch.context() as patch:
        kill(patch, n)
        with pytest.raises(Killed):
            run_in(tiny_bert, tmp_path)
    resumed = run_in(tiny_bert, tmp_path)
    assert essentials(resumed) == essentials(uncapped)


# The loop's checkpoint after iteration 2, step by step (every file write ends in a move): best_config.json (not part
# of the commit), the adapted LRF's weights saved under a new name, the accounts and the loop state staged, the commit,
# each moved into place. Before, accounts.json was written first, and a kill in the weights' save (87 MB on Amazon)
# resumed with the iteration counted twice (86 runs instead of 74).
LOOP_CHECKPOINT = ["replace best_config.json", "LRF save after-1-adaptations.tmp", "replace heads.safetensors",
                   "replace value_heads.safetensors",
                   "replace backbone.safetensors", "replace config.json", "replace after-1-adaptations",
                   "replace accounts.json.next", "replace loop_state.json.next", "replace checkpoint.commit",
                   "replace accounts.json", "replace loop_state.json", "unlink checkpoint.commit"]


def kill_in_the_loop_checkpoint(monkeypatch, before: str | None) -> list[str]:
    """Kill the run at the step `before` of the loop's checkpoint after iteration 2 (None: just after the
    checkpoint); returns the steps it took."""
    import os

    from optimas_cli.lrf.model import LocalRewardModel
    from optimas_cli.optim.loop import OptimasLoop

    steps, inside, checkpoint = [], [], OptimasLoop._checkpoint

    def step(label, real):
        def counted(*args, **kwargs):
            if inside:
                steps.append(f"{label} {os.path.basename(args[-1])}")
                if steps[-1] == before:
                    raise Killed
            return real(*args, **kwargs)
        return counted

    def loop_checkpoint(self, done, *args):
        if done != 2:
            return checkpoint(self, done, *args)
        inside.append(done)
        try:
            checkpoint(self, done, *args)
        finally:
            inside.clear()
        raise Killed

    monkeypatch.setattr(OptimasLoop, "_checkpoint", loop_checkpoint)
    monkeypatch.setattr(LocalRewardModel, "save", step("LRF save", LocalRewardModel.save))
    monkeypatch.setattr(os, "replace", step("replace", os.replace))
    monkeypatch.setattr(os, "unlink", step("unlink", os.unlink))
    return steps


# In the weights' save, one file staged, committed with none or one moved into place, all moved, after the checkpoint.
@pytest.mark.parametrize("before", ["replace backbone.safetensors", "replace loop_state.json.next",
                                    "replace accounts.json", "replace loop_state.json", "unlink checkpoint.commit", None])
def test_a_run_killed_anywhere_in_a_checkpoint_resumes_as_an_uninterrupted_run(tiny_bert, tmp_path, uncapped,
                                                                              monkeypatch, before):
    with monkeypatch.context() as patch:
        steps = kill_in_the_loop_checkpoint(patch, before)
        with pytest.raises(Killed):
            run_in(tiny_bert, tmp_path)
    assert steps == (LOOP_CHECKPOINT[:LOOP_CHECKPOINT.index(before) + 1] if before else LOOP_CHECKPOINT), steps
    resumed = run_in(tiny_bert, tmp_path)
    assert essentials(resumed) == essentials(uncapped)


@pytest.mark.parametrize("value, message", [(-1, "must be above 0"), ("abc", "must be a number"), (True, "must be a number")])
def test_bad_caps_are_one_clear_error(value, message):
    with pytest.raises(UserError, match=message):
        BudgetCaps.from_budget({"max_runs": value})


def test_caps_warn_at_half_and_four_fifths_then_stop():
    spent, warnings = {"max_runs": 0.0}, []
    caps = BudgetCaps(max_runs=10, spent=lambda: spent, on_warning=warnings.append)
    for used in (4, 5, 6, 8, 9):
        spent["max_runs"] = used
        caps.check()
    assert [w.split("(")[1] for w in warnings] == ["50% reached)", "80% reached)"]
    spent["max_runs"] = 10
    with pytest.raises(BudgetExhausted, match="max_runs=10"):
        caps.check()
    assert caps.stopped.cap == "max_runs"


def test_a_unit_that_crosses_both_warnings_warns_once_and_a_known_cost_stops_before_it():
    spent, warnings = {"max_runs": 0.0}, []
    caps = BudgetCaps(max_runs=10, spent=lambda: spent, on_warning=warnings.append)
    spent["max_runs"] = 9  # one unit from 0 to 90%: before, the 50% and the 80% warning together
    caps.check()
    assert [w.split("(")[1] for w in warnings] == ["80% reached)"]
    caps.check({"max_runs": 1})  # lands on the cap: allowed
    with pytest.raises(BudgetExhausted, match="would be crossed .*needs 2 more"):
        caps.check({"max_runs": 2})


def test_a_run_reports_its_gain_over_the_initial_configuration_on_the_same_test_examples(uncapped):
    from optimas_cli.app import before_after_line

    test, initial, gain = uncapped["test"], uncapped["test_initial"], uncapped["test_gain"]
    assert len(test["per_example"]) == len(initial["per_example"]) == test["n"]
    expected = sum(test["per_example"]) / test["n"] - sum(initial["per_example"]) / test["n"]
    assert gain["delta"] == pytest.approx(expected)
    assert gain["ci_low"] <= gain["delta"] <= gain["ci_high"]
    phases = uncapped["ledger"]["by_phase"]
    assert phases["test_initial"]["runs"] == phases["test"]["runs"] > 0  # the initial config really ran
    line = before_after_line(uncapped)
    assert "initial" in line and "paired gain" in line and "95% CI" in line
