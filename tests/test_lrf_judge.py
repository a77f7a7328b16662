"""The LLM-judge baseline and the alignment metrics it is compared with."""
from __future__ import annotations

import re

import pytest
from fakes import ScriptedLM

from optimas_cli.lrf.judge import JUDGE_COMPONENT, JUDGE_PHASE, judge_accuracy, parse_verdict
from optimas_cli.lrf.metrics import alignment_report, pairwise_accuracy
from optimas_cli.lrf.pairs import PreferencePair


@pytest.mark.parametrize("text, verdict", [
    ("A", "A"), (" b.", "B"), ("A. B is too long", "A"), ("B", "B"), ("**B**", "B"), ("(A)", "A"), ("Answer: B", "B"),
    ("Output A is better than Output B.", "A"), ("I think B is better.", "B"), ("The better one is Output B", "B"),
    ("Verdict: A", "A"), ("A or B? Hard to say", None), ("", None), ("neither", None), ("Both are fine", None),
])
def test_verdicts_are_parsed_robustly_and_ambiguity_is_not_guessed(text, verdict):
    assert parse_verdict(text) == verdict


def keyword_pairs(component, n, keyword):
    return [PreferencePair(component, {"question": f"question {i}"}, {"answer": f"{keyword} answer {i}"},
                           {"answer": f"plain answer {i}"}, 1.0, 0.0) for i in range(n)]


def sides(req):
    text = req.messages[-1]["content"]
    a = re.search(r"Output A:\nanswer: (.*)", text).group(1)
    b = re.search(r"Output B:\nanswer: (.*)", text).group(1)
    return a, b


def test_a_judge_that_reads_the_outputs_scores_perfectly_and_sees_k_scored_examples():
    held = keyword_pairs("gen", 10, "cited") + keyword_pairs("router", 6, "fast")
    train = keyword_pairs("gen", 5, "cited")
    lm = ScriptedLM(lambda req: "A" if any(k in sides(req)[0] for k in ("cited", "fast")) else "B")
    result = judge_accuracy(lm, held, train, k=4, components={"gen": "writes answers"}, seed=3)
    assert result["per_component"] == {"gen": {"accuracy": 1.0, "n": 10, "unparsable": 0, "parse_rate": 1.0},
                                       "router": {"accuracy": 1.0, "n": 6, "unparsable": 0, "parse_rate": 1.0}}
    assert result["mean"] == 1.0 and result["unparsable"] == 0 and result["parse_rate"] == 1.0
    gen_prompts = [r.messages[-1]["content"] for c, r in lm.requests if "Component: gen" in r.messages[-1]["content"]]
    assert all(p.count("### Example") == 4 and "Role: writes answers" in p for p in gen_prompts)
    assert all(c == JUDGE_COMPONENT and r.temperature == 0.0 for c, r in lm.requests)
    assert set(lm.phases) == {JUDGE_PHASE}  # the judge's tokens land in its phase of the ledger, not "-"
    # the chosen output was shown on both sides across the pairs (position is randomized)
    assert {("cited" in sides(r)[0]) for _, r in lm.requests if "Component: gen" in r.messages[-1]["content"]} == {True, False}


def test_a_judge_that_always_says_a_is_near_chance_and_unparsable_answers_are_ties():
    held = keyword_pairs("gen", 200, "cited")
    always_a = judge_accuracy(ScriptedLM("A"), held, [], k=0, seed=0)
    assert 0.4 < always_a["mean"] < 0.6 and always_a["parse_rate"] == 1.0
    # A judge that never answers is a coin flip (0.5), not below chance; its parse rate says why.
    rambling = judge_accuracy(ScriptedLM("Both outputs have merit."), held[:20], [], k=0)
    assert rambling["mean"] == 0.5 and rambling["per_component"]["gen"]["unparsable"] == 20
    assert rambling["parse_rate"] == 0.0 and rambling["per_component"]["gen"]["parse_rate"] == 0.0
    half = judge_accuracy(ScriptedLM(lambda req: "A" if "cited" in sides(req)[0] else "unsure"), held[:40], [], k=0)
    assert 0.5 < half["mean"] < 1.0 and 0.0 < half["parse_rate"] < 1.0
    assert half["mean"] == pytest.approx(half["parse_rate"] + 0.5 * (1 - half["parse_rate"]))


class LengthReward:
    """A stand-in reward: longer answers score higher."""

    def score(self, component_name, inputs, outputs):
        return [float(len(o["answer"])) for o in outputs]


def test_pairwise_accuracy_is_per_component_with_a_macro_mean_and_ties_count_as_misses():
    pairs = keyword_pairs("gen", 4, "well cited")  # chosen longer: all correct
    pairs += [PreferencePair("router", {}, {"answer": "ab"}, {"answer": "abc"}, 1.0, 0.0),  # wrong
              PreferencePair("router", {}, {"answer": "ab"}, {"answer": "cd"}, 1.0, 0.0)]  # tie: a miss
    acc = pairwise_accuracy(LengthReward(), pairs)
    assert acc["per_component"] == {"gen": {"accuracy": 1.0, "n": 4}, "router": {"accuracy": 0.0, "n": 2}}
    assert acc["mean"] == 0.5 and acc["n"] == 6
    judge = {"per_component": {"gen": {"accuracy": 0.5, "n": 4, "unparsable": 1, "parse_rate": 0.75}}, "mean": 0.5,
             "parse_rate": 0.75}
    counts = {"gen": {"collected": 9, "trained": 5, "test": 4}, "picker": {"collected": 3, "trained": 3, "test": 0}}
    report = alignment_report(acc, judge, counts, {"picker": "3 pairs, fewer than the 20 a test split needs"})
    assert report["components"]["gen"] == {"pairwise_accuracy": 1.0, "judge_accuracy": 0.5, "judge_parse_rate": 0.75,
                                           "n_pairs": 4, "judge_unparsable": 1, "pairs": counts["gen"],
                                           "pairwise_accuracy_distinguishable": 1.0,
                                           "judge_accuracy_distinguishable": None, "n_distinguishable": 4}
    assert report["components"]["router"]["judge_accuracy"] is None
    # a component without a test split reads n/a with its reason, never an accuracy on training pairs
    assert report["components"]["picker"] == {"pairwise_accuracy": None, "judge_accuracy": None,
                                              "judge_parse_rate": None, "n_pairs": 0, "pairs": counts["picker"],
                                              "pairwise_accuracy_distinguishable": None,
                                              "judge_accuracy_distinguishable": None, "n_distinguishable": 0,
                                              "no_test": "3 pairs, fewer than the 20 a test split needs"}
    assert (report["mean_pairwise_accuracy"], report["mean_judge_accuracy"]) == (0.5, 0.5)
    assert report["judge_parse_rate"] == 0.75
    empty = alignment_report(acc, None, {"picker": {"collected": 0}})["components"]["picker"]
    assert empty["no_test"].startswith("no pairs collected")


def test_indistinguishable_test_pairs_are_ties_in_both_headlines_and_left_out_only_of_the_figure_beside():
    # Before: they were dropped from the denominator, so 4 right of 4 read 100% for the LRF.
    right = keyword_pairs("gen", 4, "well cited")  # the LRF ranks these right
    alike = [PreferencePair("gen", {"question": f"q{i}"}, {"answer": "x"}, {"answer": "x "}, 1.0, 0.0) for i in range(4)]
    acc = pairwise_accuracy(LengthReward(), right + alike, indistinguishable=alike)
    assert acc["per_component"]["gen"] == {"accuracy": (4 + 0.5 * 4) / 8, "n": 8}
    assert acc["distinguishable"]["per_component"]["gen"] == {"accuracy": 1.0, "n": 4}
    always_a = judge_accuracy(ScriptedLM("A"), right + alike, [], k=0, seed=0, indistinguishable=alike)
    assert always_a["n"] == 8 and always_a["distinguishable"]["n"] == 4  # the judge reads all 8
    report = alignment_report(acc, always_a)
    gen = report["components"]["gen"]
    assert (gen["pairwise_accuracy"], gen["pairwise_accuracy_distinguishable"]) == (0.75, 1.0)
    assert (gen["n_pairs"], gen["n_distinguishable"]) == (8, 4)
    assert gen["judge_accuracy_distinguishable"] == always_a["distinguishable"]["mean"]
    assert report["mean_pairwise_accuracy"] == 0.75 and report["mean_pairwise_accuracy_distinguishable"] == 1.0
