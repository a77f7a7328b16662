"""Every method states where its instruction candidates come from (results.json `proposer`), and one
top-level `proposer` sets it for every method that can choose (Table 2 compares like with like)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from optimas_cli.flows.setup import build_budget, build_method
from optimas_cli.system import RunContext, RunLedger
from optimas_pipelines.toys import retriever
from tests.test_matched_cost import composed
from tests.test_methods_toys import capitals

CHOOSING = ["optimas", "optimas_no_adapt", "global_reward", "hbc", "dspy"]


def proposers(*overrides: str) -> dict[str, str | None]:
    out = {}
    for name in [*CHOOSING, "textgrad", "unoptimized"]:
        cfg = composed(f"method={name}", *overrides)
        ctx = RunContext(ledger=RunLedger(2), lm=SimpleNamespace(model=cfg.lm.model))
        out[name] = build_method(cfg, build_budget(cfg)).prompt_proposer(capitals(), ctx)
    return out


@pytest.mark.parametrize("overrides, expected", [
    (("lm=local",), "mixed"),          # auto: the embedded model cannot write good instructions alone
    (("lm=openai",), "lm"),            # auto with an API model
    (("lm=local", "proposer=lm"), "lm"),  # the like-with-like run for TextGrad
])
def test_one_proposer_setting_reaches_every_method_that_chooses_one(overrides, expected):
    found = proposers(*overrides)
    assert {found[n] for n in CHOOSING} == {expected}
    assert found["textgrad"] == "lm" and found["unoptimized"] is None  # TGD's rewrites; no prompt search


def test_a_pipeline_without_prompt_components_has_no_proposer():
    cfg = composed("method=optimas", "lm=local")
    ctx = RunContext(ledger=RunLedger(2), lm=SimpleNamespace(model=cfg.lm.model))
    assert build_method(cfg, build_budget(cfg)).prompt_proposer(retriever.build(), ctx) is None


def test_an_unknown_proposer_is_one_clear_error():
    from optimas_cli.errors import UserError

    cfg = composed("method=dspy", "proposer=best")
    with pytest.raises(UserError, match="unknown prompt proposer 'best'"):
        build_method(cfg, build_budget(cfg)).prompt_proposer(capitals(), RunContext(ledger=RunLedger(2)))
