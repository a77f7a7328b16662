"""STaRK-Prime metric (reciprocal rank over five candidates), score parsing and single-LLM matching."""
from __future__ import annotations

import math

import pytest

from optimas_pipelines.stark_prime.metric import MRR, name_match_scores, reciprocal_rank
from optimas_pipelines.stark_prime.score_parsing import ParseCounts, parse_scores
from optimas_pipelines.stark_prime.system import parse_entity_name

IDS = [11, 22, 33, 44, 55]


@pytest.mark.parametrize(
    "scores, answers, expected",
    [
        ([0.9, 0.1, 0.2, 0.3, 0.4], [11], 1.0),
        ([0.1, 0.9, 0.5, 0.3, 0.4], [33], 1 / 2),
        ([0.1, 0.9, 0.2, 0.3, 0.4], [33], 1 / 4),
        ([0.5, 0.6, 0.7, 0.8, 0.1], [55], 1 / 5),
        ([0.5, 0.5, 0.5, 0.5, 0.5], [33], 1 / 5),  # a constant list: pessimistic tie, never 1.0
        ([0.9, 0.9, 0.1, 0.1, 0.1], [22], 1 / 2),  # gold tied with one other: ranked below it
        ([0.9, 0.8, 0.7, 0.1, 0.1], [33, 44], 1 / 3),  # several answers: the best-ranked counts
        ([0.1, 0.9, 0.8, 0.7, 0.95], [22, 55], 1.0),
        ([0.9, 0.8, 0.7, 0.6, 0.5], [99], 0.0),  # no answer among the candidates
    ],
)
def test_reciprocal_rank(scores, answers, expected):
    assert reciprocal_rank(scores, IDS, answers) == pytest.approx(expected)


def test_metric_reads_final_scores_and_rejects_malformed_rankings():
    ex = {"candidate_ids": IDS, "answer_ids": [44], "candidate_names": ["a", "b", "c", "d", "e"]}
    assert MRR(ex, {"final_scores": [0.1, 0.2, 0.3, 0.9, 0.4]}) == 1.0
    assert MRR.name == "mrr"
    for bad in (None, [0.1, 0.2], [0.1, 0.2, "x", 0.3, 0.4], [0.1, math.nan, 0.2, 0.3, 0.4], [True] * 5):
        assert MRR(ex, {"final_scores": bad}) == 0.0


def test_single_llm_answers_are_matched_to_candidate_names():
    names = ["Filensin", "BFSP1 protein", "Lens disease", "Crystallin alpha", "Vimentin"]
    ex = {"candidate_ids": IDS, "answer_ids": [11], "candidate_names": names}
    assert MRR(ex, {"answer_name": "filensin"}) == 1.0  # exact up to case
    assert MRR(ex, {"answer_name": "Lens disease"}) == pytest.approx(1 / 5)  # a distractor: gold ties the rest, last
    assert MRR(ex, {"answer_name": "aspirin"}) == 0.0  # nothing on the list was named
    assert MRR(ex, {"answer_name": ""}) == 0.0
    scores = name_match_scores("alpha crystallin protein", names)
    assert scores[3] > scores[1] > 0 and scores[0] == 0


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"1": 0.9, "2": 0.1, "3": 0.5, "4": 0.0, "5": 0.25}', [0.9, 0.1, 0.5, 0.0, 0.25]),
        ("Json Scores {1: 0.8, 2: 0.6, 3: 0.4, 4: 0.2, 5: 1}", [0.8, 0.6, 0.4, 0.2, 1.0]),
        ("Here are the scores:\n1: 0.3\n2: 0.7\n3: 0.1\n4: 0.9\n5: 0.5\nHope this helps.", [0.3, 0.7, 0.1, 0.9, 0.5]),
        ("Candidate 1 has score 0.2, Candidate 2 has score 0.4, Candidate 3 - 0.6, Candidate 4: 0.8, "
         "candidate 5 gets 1.0", [0.2, 0.4, 0.6, 0.8, 1.0]),
        ("[0.1, 0.2, 0.3, 0.4, 0.5]", [0.1, 0.2, 0.3, 0.4, 0.5]),
        ('{"1": 8, "2": 2, "3": 10, "4": 0, "5": 5}', [0.8, 0.2, 1.0, 0.0, 0.5]),  # a 0-10 scale
        ('{"1": "90", "2": "10", "3": "50", "4": "0", "5": "100"}', [0.9, 0.1, 0.5, 0.0, 1.0]),  # 0-100, quoted
        ("0.5 0.5 0.5 0.2 0.9", [0.5, 0.5, 0.5, 0.2, 0.9]),
    ],
)
def test_parse_scores_reads_what_weak_models_write(text, expected):
    assert parse_scores(text) == pytest.approx(expected)


@pytest.mark.parametrize(
    "text",
    ["", "I cannot score these candidates.", '{"1": 0.9, "2": 0.1, "3": 0.5, "4": 0.2}', "[0.1, 0.2, 0.3]",
     '{"1": 900, "2": 1, "3": 1, "4": 1, "5": 1}', "1 2 3 4 5 6 7"],
)
def test_unreadable_scores_are_none(text):
    assert parse_scores(text) is None


def test_parse_counts_tally_per_component():
    counts = ParseCounts()
    for ok in (True, False, True):
        counts.record("text_scorer", ok)
    assert counts.counts == {"text_scorer": {"parsed": 2, "unparsable": 1}}


@pytest.mark.parametrize(
    "text, name",
    [("Filensin", "Filensin"), ("Answer: BFSP2.\nIt is a protein.", "BFSP2"), ('\n\n- "Vimentin"', "Vimentin"),
     ("1. Acute intermittent porphyria", "Acute intermittent porphyria"), ("", "")],
)
def test_parse_entity_name(text, name):
    assert parse_entity_name(text) == {"answer_name": name}
