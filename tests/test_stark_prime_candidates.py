"""Candidate selection, the candidates JSONL and its cache -- on the SYNTHETIC knowledge base."""
from __future__ import annotations

import json

import numpy as np
import pytest

from optimas_cli.errors import DataError
from optimas_pipelines.stark_prime import build
from optimas_pipelines.stark_prime import data as stark_data
from optimas_pipelines.stark_prime.candidates import select_candidates
from optimas_pipelines.stark_prime.knowledge_base import LocalKnowledgeBase
from optimas_pipelines.stark_prime.queries import Query
from tests.test_stark_prime_synthetic_kb import queries, write_synthetic_stark

IDS = [10, 11, 12, 13, 14, 15, 16, 17]
SCORES = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2])  # node 10 best ... node 17 worst


def test_gold_in_the_top_five_keeps_the_top_five():
    picked = select_candidates(IDS, SCORES, (12,), query_id=1, seed=42)
    assert sorted(n for n, _ in picked) == [10, 11, 12, 13, 14]
    assert dict(picked) == {10: 0.9, 11: 0.8, 12: 0.7, 13: 0.6, 14: 0.5}


def test_gold_outside_the_top_five_replaces_the_fifth():
    picked = select_candidates(IDS, SCORES, (17, 16), query_id=1, seed=42)
    assert sorted(n for n, _ in picked) == [10, 11, 12, 13, 16]  # the better-scored answer, plus the top four


def test_several_answers_in_the_top_five_stay_as_the_official_code_keeps_them():
    picked = [n for n, _ in select_candidates(IDS, SCORES, (11, 13), query_id=1, seed=42)]
    assert sorted(picked) == [10, 11, 12, 13, 14]


def test_order_is_shuffled_per_query_and_reproducible():
    orders = {tuple(n for n, _ in select_candidates(IDS, SCORES, (12,), query_id=q, seed=42)) for q in range(20)}
    assert len(orders) > 5  # the gold is not always in the same slot
    assert select_candidates(IDS, SCORES, (12,), 3, 42) == select_candidates(IDS, SCORES, (12,), 3, 42)


def test_answers_missing_from_the_knowledge_base_are_an_error():
    with pytest.raises(DataError, match="none of the answer nodes \\[99\\] of query 7"):
        select_candidates(IDS, SCORES, (99,), query_id=7, seed=42)


@pytest.fixture()
def synthetic(tmp_path):
    data_dir, kb_dir = write_synthetic_stark(tmp_path)
    return data_dir, kb_dir, tmp_path / "cache"


def test_examples_hold_five_candidates_with_their_similarities(synthetic):
    data_dir, kb_dir, cache = synthetic
    pipeline = build(data_dir, kb_dir=kb_dir, cache_dir=cache, train_size=None, val_size=None, test_size=None)
    kb = LocalKnowledgeBase(kb_dir)
    text_of = {q[0]: q[1] for q in queries()}
    examples = pipeline.splits.train + pipeline.splits.val + pipeline.splits.test
    assert len(examples) == 16
    outside_top5 = 0
    for ex in examples:
        assert len(set(ex["candidate_ids"])) == 5
        assert sum(c in ex["answer_ids"] for c in ex["candidate_ids"]) == 1
        sims = kb.similarities(Query(ex["question_id"], text_of[ex["question_id"]], ()))
        assert ex["emb_scores"] == pytest.approx([sims[kb.node_ids.index(c)] for c in ex["candidate_ids"]], abs=1e-4)
        assert ex["candidate_names"] == [kb.name(c) for c in ex["candidate_ids"]]
        assert ex["relation_info"].count("\nCandidate ") == 4 and ex["text_info"].startswith("Candidate 1:\n- name: ")
        gold_rank = int((sims > sims[kb.node_ids.index(ex["answer_ids"][0])]).sum())
        outside_top5 += gold_rank >= 5
    assert outside_top5 > 0  # the fixture exercises the gold-substitution rule


def test_infos_are_cut_to_info_chars(synthetic):
    data_dir, kb_dir, cache = synthetic
    ex = build(data_dir, kb_dir=kb_dir, cache_dir=cache, info_chars=30).splits.test[0]
    blocks = ex["relation_info"].split("\n\n")
    assert len(blocks) == 5
    assert all(len(b.split(":\n", 1)[1]) <= 30 for b in blocks)


def test_the_build_is_cached_and_reused_without_the_knowledge_base(synthetic, monkeypatch):
    data_dir, kb_dir, cache = synthetic
    first = build(data_dir, kb_dir=kb_dir, cache_dir=cache)
    assert first.info["candidates_source"].startswith("kb_dir") and len(list(cache.glob("candidates-kb-*.jsonl"))) == 1

    def no_kb(*_a, **_k):
        raise AssertionError("the knowledge base was read although the cache covers every query")

    monkeypatch.setattr(stark_data, "LocalKnowledgeBase", no_kb)
    again = build(data_dir, kb_dir=kb_dir, cache_dir=cache)
    assert again.info["candidates_source"].startswith("cache ")
    assert again.splits.test == first.splits.test
    with open(kb_dir / "nodes.jsonl", "a") as fh:  # the folder changed: the cache no longer applies
        fh.write(json.dumps({"id": 30, "name": "Vantor gene", "type": "gene/protein"}) + "\n")
    with pytest.raises(AssertionError, match="knowledge base was read"):
        build(data_dir, kb_dir=kb_dir, cache_dir=cache)


def test_a_prebuilt_candidates_file_replaces_the_knowledge_base(synthetic, tmp_path):
    data_dir, kb_dir, cache = synthetic
    built = build(data_dir, kb_dir=kb_dir, cache_dir=cache)
    rows = [json.loads(line) for line in next(cache.glob("*.jsonl")).read_text().splitlines()]
    for row in rows:  # the official files' spelling, and no names: both must be accepted
        row["simiarity"] = row.pop("similarity")
        del row["names"]
    path = tmp_path / "prebuilt.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    from_file = build(data_dir, candidates_file=path)
    assert from_file.splits.test == built.splits.test
    assert from_file.info["candidates_source"] == f"candidates_file {path}"

    path.write_text("".join(json.dumps(r) + "\n" for r in rows[1:]))
    with pytest.raises(DataError, match="no candidates for 1 selected query id"):
        build(data_dir, candidates_file=path)
    rows[1]["candidate_ids"] = rows[1]["candidate_ids"][:4]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError, match="line 2: candidate_ids must be a list of 5"):
        build(data_dir, candidates_file=path)
    with pytest.raises(DataError, match="candidates_file .* not found"):
        build(data_dir, candidates_file=tmp_path / "nope.jsonl")
