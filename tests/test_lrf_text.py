"""The text phi reads: every part named, and the output kept visible when the inputs are long."""
from __future__ import annotations

import pytest
from test_lrf_tiny_backbone import build_tiny_bert

from optimas_cli.lrf.text import ComponentInfo, TextRenderer, component_info, component_infos, fair_shares
from optimas_cli.system import Component, CompoundSystem


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(build_tiny_bert(tmp_path_factory.mktemp("bert")))


INFO = ComponentInfo("answer_generator", "writes the final answer", ("question", "context"), ("answer",))


def count(tokenizer, text):
    return len(tokenizer(text)["input_ids"])


def test_short_text_names_component_description_inputs_and_output(tokenizer):
    text = TextRenderer(tokenizer, 128).render(INFO, {"question": "capital of france", "context": ["paris", "rome"]},
                                               {"answer": "paris"})
    assert text.splitlines() == [
        "Component: answer_generator", "Role: writes the final answer", "Input question: capital of france",
        "Input context: - paris", "- rome", "Output answer: paris",
    ]


def test_long_inputs_are_cut_fairly_and_the_output_stays_whole(tokenizer):
    renderer = TextRenderer(tokenizer, 64)
    long_context = " ".join(["alpha beta gamma delta"] * 200)
    text = renderer.render(INFO, {"question": "capital of france", "context": long_context}, {"answer": "paris rome"})
    assert count(tokenizer, text) <= 64
    assert text.endswith("Output answer: paris rome")
    assert "Input question: capital of france" in text  # the short field is not crowded out
    assert "…" in text


def test_a_long_output_keeps_at_least_half_the_budget(tokenizer):
    renderer = TextRenderer(tokenizer, 96)
    text = renderer.render(INFO, {"question": "red " * 300, "context": "blue " * 300}, {"answer": "one two " * 300})
    assert count(tokenizer, text) <= 96
    output_line = text[text.index("Output answer:"):]
    assert count(tokenizer, output_line) >= renderer.budget // 2 - 9  # labels and the cut's mark count too


def test_fair_shares_gives_short_pieces_their_length_and_splits_the_rest():
    assert fair_shares([5, 100, 100], 65) == [5, 30, 30]
    assert fair_shares([5, 10], 100) == [5, 10]
    assert fair_shares([], 10) == []


def test_component_infos_come_from_components_dicts_or_strings():
    comp = Component("gen", "writes", ("q",), ("a",))
    assert component_infos(CompoundSystem([comp], inputs=("q",), outputs=("a",)))["gen"] == ComponentInfo("gen", "writes", ("q",), ("a",))
    assert component_info("gen", "writes") == ComponentInfo("gen", "writes")
    assert component_info("gen", {"description": "d", "inputs": ["q"]}).inputs == ("q",)
    with pytest.raises(TypeError):
        component_info("gen", 3)


def test_a_cut_keeps_head_and_tail_so_outputs_that_differ_at_the_end_stay_apart(tokenizer):
    renderer = TextRenderer(tokenizer, 64)
    shared = " ".join(["alpha beta gamma delta"] * 50)
    short, longer = renderer.render(INFO, {"question": "q"}, {"answer": shared + " red"}), \
        renderer.render(INFO, {"question": "q"}, {"answer": shared + " blue"})
    assert short != longer and short.endswith("red") and longer.endswith("blue")
    assert count(tokenizer, short) <= 64 and " … " in short
    assert "Output answer: alpha beta" in short  # the head is still there


def test_a_declared_view_renders_passages_as_their_count_and_titles(tokenizer):
    comp = Component("retriever", "retrieves", ("keywords",), ("passages",), reward_view={"passages": "titled_lines"})
    info = component_info("retriever", comp)
    assert info.views == {"passages": "titled_lines"}
    assert component_info("retriever", info.to_dict()) == info  # survives a saved model's config.json
    body = " ".join(["the same opening words of a long paragraph"] * 30)
    top1 = {"passages": f"Paris | {body}"}
    top3 = {"passages": f"Paris | {body}\nLyon | {body}\nRome | {body}"}
    text1, text3 = (TextRenderer(tokenizer, 64).render(info, {"keywords": "city"}, out) for out in (top1, top3))
    assert text1.endswith("Output passages: 1 passages: Paris")
    assert text3.endswith("Output passages: 3 passages: Paris; Lyon; Rome")
    plain = component_info("retriever", Component("retriever", "retrieves", ("keywords",), ("passages",)))
    # read as text, passages that begin and end alike collide: the case the view exists for
    assert TextRenderer(tokenizer, 48).render(plain, {"keywords": "city"}, top1) == \
        TextRenderer(tokenizer, 48).render(plain, {"keywords": "city"}, top3)
    with pytest.raises(ValueError, match="unknown reward view"):
        ComponentInfo("retriever", views={"passages": "summary"})
