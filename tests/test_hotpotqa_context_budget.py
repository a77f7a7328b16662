"""The hint generator's retrieved passages are cut to its prompt budget (whole passages, best first), counted."""
from __future__ import annotations

import pytest

from optimas_cli.errors import UserError
from optimas_cli.system.context import RunContext
from optimas_cli.system.ledger import RunLedger
from optimas_pipelines.hotpotqa.context_budget import CHARS_PER_TOKEN, PassageBudget
from optimas_pipelines.hotpotqa.passage_search import Passage
from optimas_pipelines.hotpotqa.system import build
from optimas_pipelines.hotpotqa.system import components as hotpotqa_components
from tests.fakes import ScriptedLM

PASSAGES = [f"Title {i} | " + "word " * 40 for i in range(25)]  # ~210 characters each


def test_whole_passages_are_kept_best_first_until_the_budget_is_full():
    text = "\n".join(PASSAGES)
    fitted, cuts = PassageBudget("retrieve_content", 128)({"retrieve_content": text, "q": 1})
    kept = fitted["retrieve_content"].split("\n")
    assert kept == PASSAGES[: len(kept)] and len(fitted["retrieve_content"]) <= 128 * CHARS_PER_TOKEN
    assert len(kept) == 2 and cuts == {"prompts_cut": 1, "passages_cut": 23} and fitted["q"] == 1


def test_a_prompt_that_fits_is_untouched_and_a_huge_first_passage_is_cut_at_the_budget():
    budget = PassageBudget("retrieve_content", 1000)
    assert budget({"retrieve_content": PASSAGES[0]}) == ({"retrieve_content": PASSAGES[0]}, {})
    assert PassageBudget("retrieve_content", None)({"retrieve_content": "x" * 10**5})[1] == {}
    fitted, cuts = PassageBudget("retrieve_content", 10)({"retrieve_content": "y" * 100 + "\n" + "z" * 10})
    assert fitted["retrieve_content"] == "y" * 40 and cuts == {"prompts_cut": 1, "passages_cut": 2}


class ManyPassages:
    def search(self, queries, k):
        return [[Passage(f"Title {i}", "word " * 40) for i in range(k)] for _ in queries]


def test_the_hint_generator_sees_only_what_fits_and_the_run_counts_the_cut():
    lm = ScriptedLM("Paris")
    comps = {c.name: c for c in hotpotqa_components(ManyPassages(), 25, context_tokens=128)}
    ctx = RunContext(ledger=RunLedger(5), lm=lm, phase="test")
    content = "\n".join(p.render() for p in ManyPassages().search(["q"], 25)[0])
    comps["hint_generator"].forward([{"rewritten_query": "q", "retrieve_content": content}], "Hint.", ctx)
    prompt = lm.requests[0][1].messages[-1]["content"]
    assert "Title 1 |" in prompt and "Title 2 |" not in prompt
    assert dict(ctx.ledger.events["test"]["hint_generator"]) == {"prompts_cut": 1, "passages_cut": 23}


def test_a_non_positive_budget_is_a_user_error():
    with pytest.raises(UserError, match="context_tokens"):
        build(context_tokens=0)
