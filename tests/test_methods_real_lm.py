"""DSPy and TextGrad through the real LM layer (LMClient -> litellm -> local provider) on the tiny random model.

The tiny model writes gibberish, which is exactly a weak model's worst case: DSPy's structured output
and TextGrad's <IMPROVED_VARIABLE> tags fail to parse. Both methods must finish, count the failures
and leave their LM calls in the usage ledger; DSPy drops its unparsable proposals and searches on,
TextGrad keeps the instructions it could not rewrite.
"""
from __future__ import annotations

import pytest

from optimas_cli.methods.dspy_mipro import PROPOSER_TAG, DSPyMIPRO
from optimas_cli.methods.textgrad import TextGrad
from optimas_cli.system import Splits
from tests.test_methods_toys import capitals, optimize_and_test, smoke_budget


@pytest.fixture
def small_capitals():
    """The capitals toy (two prompt components) with short prompts: every LM call is cheap."""
    pipeline = capitals()
    s = pipeline.splits
    return pipeline, Splits(s.train[:3], s.val, s.test)


def test_dspy_finishes_and_counts_parse_failures(small_capitals, tiny_lm, tmp_path):
    pipeline, splits = small_capitals
    method = DSPyMIPRO(budget=smoke_budget(iterations=1), max_tokens=12, view_data_batch_size=3)
    outcome, test, _ = optimize_and_test(method, pipeline, splits, tiny_lm, tmp_path)
    info = outcome.extras["dspy"]
    assert info["parse_failures"] > 0 and info["status"] == "optimized"  # the search went on without them
    assert info["lm_proposals"].startswith("failed, dropped: AdapterParseError")
    assert tiny_lm.usage.to_dict()["by_component"][PROPOSER_TAG]["calls"] == info["proposer_calls"]
    assert test["n"] == 2


def test_textgrad_finishes_and_counts_unparsed_updates(small_capitals, tiny_lm, tmp_path):
    pipeline, splits = small_capitals
    method = TextGrad(budget=smoke_budget(iterations=1), batch_size=2, max_tokens=12)
    outcome, test, _ = optimize_and_test(method, pipeline, splits, tiny_lm, tmp_path)
    info = outcome.extras["textgrad"]
    assert info["parse_failures"] == 2  # both prompt components got feedback; neither update was readable
    assert outcome.config == pipeline.system.default_config()
    usage = tiny_lm.usage.to_dict()["by_component"]
    assert {role: usage[f"textgrad.{role}"]["calls"] for role in ("loss", "backward", "optimizer")} == info["lm_calls"]
    assert test["n"] == 2
