"""STaRK-Prime end to end on the SYNTHETIC knowledge base with a scripted LM (no STaRK numbers here).

The scripted relation scorer reads the relations it is shown and scores each candidate by the
share of the question's named entities among its relations; the scripted text scorer answers in
prose nobody can parse. So: the relation weight decides whether the gold rises to the top.
"""
from __future__ import annotations

import json
import re

import pytest

from optimas_cli.system import RunContext, RunLedger
from optimas_cli.system.evaluate import evaluate, rewards
from optimas_pipelines.stark_prime import build
from optimas_pipelines.stark_prime.components import RELATION_PROMPT, TEXT_PROMPT
from tests.fakes import ScriptedLM
from tests.test_stark_prime_synthetic_kb import DRUGS, NAMES, write_synthetic_stark


def scripted_relation_scores(user: str) -> list[float]:
    question = re.search(r"^Query: (.*)$", user, re.MULTILINE).group(1)
    named = [n for n in NAMES if re.search(rf"\b{re.escape(n)}\b", question)]
    blocks = re.split(r"^Candidate \d:\n", user.split("\n\n", 1)[1], flags=re.MULTILINE)[1:]
    relations = [b.split("- relations:", 1)[1] if "- relations:" in b else "" for b in blocks]
    return [sum(re.search(rf"\b{re.escape(n)}\b", r) is not None for n in named) / len(named) for r in relations]


def scripted_lm(request) -> str:
    system, user = request.messages[0]["content"], request.messages[1]["content"]
    if "Relational information" in user:
        scores = scripted_relation_scores(user)
        return "Sure! " + json.dumps({str(i): s for i, s in enumerate(scores, 1)})
    assert system == TEXT_PROMPT or system.startswith("Rewritten")
    return "The candidates all look plausible to me."


@pytest.fixture()
def pipeline(tmp_path):
    data_dir, kb_dir = write_synthetic_stark(tmp_path)
    return build(data_dir, kb_dir=kb_dir, cache_dir=tmp_path / "cache", train_size=None, val_size=None, test_size=None)


def context(pipeline, lm) -> RunContext:
    return RunContext(ledger=RunLedger(len(pipeline.system)), lm=lm)


def test_the_system_wires_three_components_as_the_paper(pipeline):
    system = pipeline.system
    assert system.order == ["relation_scorer", "text_scorer", "aggregator"]
    assert system.downstream("relation_scorer") == ["aggregator"]
    config = system.default_config()
    assert config["relation_scorer"] == RELATION_PROMPT and config["text_scorer"] == TEXT_PROMPT
    assert config["aggregator"] == {"relation_weight": 0.1, "text_weight": 0.1}
    assert len(system.components["aggregator"].candidate_values()) == 4
    assert pipeline.metric.name == "mrr" and pipeline.splits.sizes() == {"train": 8, "val": 4, "test": 4}


def test_end_to_end_the_relation_weight_decides_the_ranking(pipeline):
    lm = ScriptedLM(scripted_lm)
    examples = pipeline.splits.train + pipeline.splits.val + pipeline.splits.test
    default = pipeline.system.default_config()
    trajs = pipeline.system.run(examples, default, context(pipeline, lm))

    # Two LM calls per example (one per scorer), each with the query and all five candidates.
    assert sorted(c for c, _ in lm.requests) == ["relation_scorer"] * 16 + ["text_scorer"] * 16
    _, first = lm.requests[0]
    assert first.max_tokens == 128 and first.messages[0]["content"] == RELATION_PROMPT
    assert examples[0]["question"] in first.messages[1]["content"] and "Candidate 5:" in first.messages[1]["content"]

    # Unparsable text scores fall back to neutral 0.5s and are counted; the relation scores were read.
    assert pipeline.info["score_parsing"] == {"relation_scorer": {"parsed": 16, "unparsable": 0},
                                              "text_scorer": {"parsed": 0, "unparsable": 16}}
    for t in trajs:
        relation = scripted_relation_scores(
            next(r.messages[1]["content"] for c, r in lm.requests
                 if c == "relation_scorer" and t.example["question"] in r.messages[1]["content"]))
        assert t.state["text_scores"] == [0.5] * 5
        assert t.state["final_scores"] == pytest.approx(
            [0.1 * r + 0.1 * 0.5 + e for r, e in zip(relation, t.example["emb_scores"], strict=True)], abs=1e-4)

    embedding_only = sum(pipeline.metric(ex, {"final_scores": ex["emb_scores"]}) for ex in examples) / len(examples)
    by_choice = {}
    for weights in pipeline.system.components["aggregator"].candidate_values():
        config = default.replace("aggregator", weights)
        by_choice[(weights["relation_weight"], weights["text_weight"])] = sum(
            rewards(pipeline, pipeline.system.run(examples, config, context(pipeline, lm)))) / len(examples)
    assert embedding_only < 0.7  # the fixture is not solved by similarity alone
    assert by_choice[(1.0, 0.1)] == by_choice[(1.0, 1.0)] == 1.0  # neutral text scores change no ranking
    assert by_choice[(0.1, 0.1)] == by_choice[(0.1, 1.0)] < 1.0


def test_the_prompt_configuration_reaches_the_lm(pipeline):
    lm = ScriptedLM(scripted_lm)
    config = pipeline.system.default_config().replace("text_scorer", "Rewritten instruction.")
    result = evaluate(pipeline, config, pipeline.splits.test, context(pipeline, lm), repeats=2)
    assert result["n"] == 4 and len(result["scores"]) == 2
    assert {r.messages[0]["content"] for c, r in lm.requests if c == "text_scorer"} == {"Rewritten instruction."}
    assert {r.sample_index for _, r in lm.requests} == {0, 1}  # repeats ask for distinct samples


def test_single_llm_names_an_entity_and_is_matched_to_the_candidates(pipeline):
    task = pipeline.single_llm
    examples = pipeline.splits.train
    prompts = [task.prompt(ex) for ex in examples]
    for ex, messages in zip(examples, prompts, strict=True):
        assert ex["question"] in messages[-1]["content"]
        assert not any(name in messages[-1]["content"] for name in ex["candidate_names"] if name not in ex["question"])

    def knows_the_drugs(messages) -> str:
        text = messages[-1]["content"]
        return next((f"Answer: {d}." for i, d in enumerate(DRUGS) if "targets" in text and NAMES[i] in text), "No idea")

    scores = [pipeline.metric(ex, task.parse(knows_the_drugs(m))) for ex, m in zip(examples, prompts, strict=True)]
    assert scores == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]  # four drug questions answered, four gene ones not
