"""HotpotQA answer F1 (official normalisation and yes/no rule) and the parsing of messy LM replies."""
from __future__ import annotations

import pytest

from optimas_cli.system.parsing import Unparsed
from optimas_pipelines.hotpotqa.metric import answer_f1, f1_score, normalize_answer
from optimas_pipelines.hotpotqa.prompts import parse_hints, parse_keywords, parse_rewrite, parse_short_answer


@pytest.mark.parametrize(
    "raw, normalized",
    [
        ("The Eiffel Tower", "eiffel tower"),
        ("  an   apple,  a pear ", "apple pear"),
        ("Theatre of the Absurd", "theatre of absurd"),  # 'the' as a word goes, 'Theatre' stays
        ("U.S. Army!", "us army"),
        ("Gesellschaft mit beschränkter Haftung", "gesellschaft mit beschränkter haftung"),
        ("A", ""),
    ],
)
def test_normalize_answer(raw, normalized):
    assert normalize_answer(raw) == normalized


@pytest.mark.parametrize(
    "prediction, gold, f1",
    [
        ("the Eiffel Tower.", "Eiffel Tower", 1.0),
        ("EIFFEL TOWER", "eiffel tower", 1.0),
        ("Eiffel", "Eiffel Tower", 2 * (1.0 * 0.5) / 1.5),  # precision 1, recall 1/2
        ("the big Eiffel Tower in Paris", "Eiffel Tower", 2 * (2 / 5 * 1.0) / (2 / 5 + 1.0)),
        ("1,000 people", "1000", 2 / 3),  # "1,000" normalises to "1000": precision 1/2, recall 1
        ("Paris", "London", 0.0),
        ("yes", "yes", 1.0),
        ("Yes.", "yes", 1.0),
        ("yes it is", "yes", 0.0),  # yes/no answers are all or nothing
        ("no", "yes", 0.0),
        ("no", "no one", 0.0),  # a special prediction never earns partial credit
        ("", "Paris", 0.0),
        (None, "Paris", 0.0),
    ],
)
def test_f1_score(prediction, gold, f1):
    assert f1_score(prediction, gold) == pytest.approx(f1)


def test_answer_f1_reads_the_system_answer_and_the_gold_field():
    assert answer_f1({"gold_answer": "Chief of Protocol"}, {"answer": "chief of protocol"}) == 1.0
    assert answer_f1({"gold_answer": "Chief of Protocol"}, {"answer": None}) == 0.0


@pytest.mark.parametrize(
    "reply, answer",
    [
        ("Answer: Paris.", "Paris"),
        ("**Short Answer:** Barack Obama", "Barack Obama"),
        ("The answer is 1969.\nBecause the landing happened then.", "1969"),
        ("Yes, both are American.", "yes"),
        ("No.", "no"),
        ("No. 5 Squadron", "No. 5 Squadron"),
        ('"Chief of Protocol"', "Chief of Protocol"),
        ("Query: Who was it?\nAnswer: Shirley Temple", "Shirley Temple"),
        ("\n\n  Kansas City  \n", "Kansas City"),
    ],
)
def test_parse_short_answer(reply, answer):
    assert parse_short_answer(reply) == answer


def test_a_reply_with_nothing_readable_is_unparsed_with_the_input_as_fallback():
    for parse, raw, inputs, fallback in [
        (parse_rewrite, "", {"question": "Who?"}, "Who?"),
        (parse_keywords, "  \n", {"rewritten_query": "Who is he?"}, "Who is he?"),
        (parse_short_answer, "Query: Who was it?", {}, ""),
        (parse_hints, "Retrieved Information: x", {}, ""),
    ]:
        with pytest.raises(Unparsed) as unparsed:
            parse(raw, inputs)
        assert unparsed.value.fallback == fallback


def test_parsers_read_labelled_replies():
    assert parse_rewrite("Rewritten Query: Who is he?\nextra", {"question": "Who?"}) == "Who is he?"
    assert parse_keywords("Search Keywords: VIVA Media, 2004", {"rewritten_query": "q"}) == "VIVA Media, 2004"
    assert parse_hints("Hints: A is B.\n- C is D.", {}) == "A is B.\nC is D."
