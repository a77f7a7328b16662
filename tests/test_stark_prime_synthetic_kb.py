"""A SYNTHETIC STaRK-Prime-shaped knowledge base (invented entities, not PrimeKG), and tests of kb_dir.

`write_synthetic_stark(tmp)` writes 30 invented nodes (10 diseases, 10 genes, 10 drugs) with
relations and texts, bag-of-words embeddings, and 16 invented queries with their own split
files. Numbers measured on it are tests of the code, never STaRK results.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest

from optimas_cli.errors import DataError
from optimas_pipelines.stark_prime.knowledge_base import LocalKnowledgeBase
from optimas_pipelines.stark_prime.queries import Query

DISEASES = ["Quorvan syndrome", "Telmic fever", "Draxon palsy", "Mirelle disease", "Obrin anemia",
            "Pasquet dystrophy", "Ulvane ataxia", "Keswin myopathy", "Horrel neuropathy", "Zintar fibrosis"]
SYMPTOMS = ["joint swelling", "night sweats", "facial weakness", "skin lesions", "pale skin", "muscle wasting",
            "unsteady gait", "muscle cramps", "burning feet", "lung scarring"]
GENES = ["QRV1", "TLM2", "DRX3", "MRL4", "OBR5", "PSQ6", "ULV7", "KSW8", "HRL9", "ZNT10"]
PROCESSES = ["lipid transport", "heat shock response", "nerve signalling", "pigment synthesis", "iron storage",
             "muscle repair", "cerebellar growth", "calcium release", "axon guidance", "collagen turnover"]
DRUGS = ["Quorvamab", "Telmicin", "Draxolol", "Mirelasone", "Obrinate", "Pasquetide", "Ulvanex", "Keswinol",
         "Horrelane", "Zintaprine"]
FORMS = ["tablet", "capsule", "injectable", "inhaled", "topical", "tablet", "capsule", "injectable", "oral", "topical"]
DISEASE_ID, GENE_ID, DRUG_ID = 0, 10, 20  # id offsets
NAMES = DISEASES + GENES + DRUGS


def drug_target(i: int) -> int:
    return (i + 3) % 10


def nodes() -> list[dict]:
    rows = []
    for i in range(10):
        rows.append({"id": DISEASE_ID + i, "name": DISEASES[i], "type": "disease", "source": "synthetic",
                     "text": f"A synthetic disorder marked by {SYMPTOMS[i]}."})
    for i in range(10):
        rows.append({"id": GENE_ID + i, "name": GENES[i], "type": "gene/protein",
                     "text": f"A synthetic gene whose protein takes part in {PROCESSES[i]}.",
                     "relations": {"associated with": [DISEASE_ID + i]}})
    for i in range(10):
        rows.append({"id": DRUG_ID + i, "name": DRUGS[i], "type": "drug",
                     "text": f"A synthetic {FORMS[i]} medication.",
                     "relations": {"indication": [DISEASE_ID + i], "target": [GENE_ID + drug_target(i)]}})
    return rows


def queries() -> list[tuple[int, str, list[int]]]:
    out = []
    for i in range(10):  # drugs: the words point at the disease and the gene, the answer is the drug
        kind = f"{FORMS[i]} medication" if i % 2 == 0 else "drug"  # odd: no word shared with the drug's text
        out.append((100 + i, f"Which {kind} treats {DISEASES[i]} and targets {GENES[drug_target(i)]}?", [DRUG_ID + i]))
    for j in range(6):  # genes
        out.append((200 + j, f"Which gene is associated with {DISEASES[j]} and involved in {PROCESSES[j]}?",
                    [GENE_ID + j]))
    return out


SPLIT_IDS = {"train": [100, 101, 102, 103, 200, 201, 202, 203], "val": [104, 105, 204, 205], "test": [106, 107, 108, 109]}


def bag_of_words(text: str, dim: int = 64) -> np.ndarray:
    """Deterministic hashed bag of words, L2-normalised (a stand-in for a text embedder)."""
    v = np.zeros(dim)
    for w in re.findall(r"[a-z0-9]+", text.lower()):
        v[int(hashlib.md5(w.encode()).hexdigest(), 16) % dim] += 1.0
    return v / (np.linalg.norm(v) or 1.0)


def write_synthetic_stark(root: Path, embeddings: bool = True) -> tuple[Path, Path]:
    """(data_dir with stark_prime/{stark_qa.csv, *.index}, kb_dir) -- all synthetic."""
    data_dir, kb_dir = root / "data", root / "kb"
    (data_dir / "stark_prime").mkdir(parents=True)
    kb_dir.mkdir()
    lines = ["id,query,answer_ids"] + [f'{qid},"{text}","{answers}"' for qid, text, answers in queries()]
    (data_dir / "stark_prime" / "stark_qa.csv").write_text("\n".join(lines) + "\n")
    for split, ids in SPLIT_IDS.items():
        (data_dir / "stark_prime" / f"{split}.index").write_text("\n".join(map(str, ids)))
    rows = nodes()
    (kb_dir / "nodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if embeddings:
        np.savez(
            kb_dir / "embeddings.npz",
            node_ids=np.array([r["id"] for r in rows]),
            node_vectors=np.stack([bag_of_words(f"{r['name']} {r['text']}") for r in rows]),
            query_ids=np.array([q[0] for q in queries()]),
            query_vectors=np.stack([bag_of_words(q[1]) for q in queries()]),
        )
    return data_dir, kb_dir


# -- tests of the kb_dir format ----------------------------------------------------------------

def test_relations_are_shown_from_both_ends(tmp_path):
    _, kb_dir = write_synthetic_stark(tmp_path)
    kb = LocalKnowledgeBase(kb_dir)
    assert kb.similarity_kind == "embeddings" and len(kb.node_ids) == 30
    drug = kb.relation_info(DRUG_ID + 0)
    assert drug.startswith("- name: Quorvamab\n- type: drug\n- relations:\n")
    assert "indication: {disease: (Quorvan syndrome),}" in drug and "target: {gene/protein: (MRL4),}" in drug
    disease = kb.relation_info(DISEASE_ID + 0)  # listed only on the drug and gene rows
    assert "associated_with: {gene/protein: (QRV1),}" in disease and "indication: {drug: (Quorvamab),}" in disease
    text = kb.text_info(DISEASE_ID + 0)
    assert text == "- name: Quorvan syndrome\n- type: disease\n- source: synthetic\n- details:\n  A synthetic disorder marked by joint swelling.\n"


def test_embedding_similarity_is_the_dot_product(tmp_path):
    _, kb_dir = write_synthetic_stark(tmp_path)
    kb = LocalKnowledgeBase(kb_dir)
    qid, text, _ = queries()[0]
    sims = kb.similarities(Query(qid, text, ()))
    node = nodes()[DISEASE_ID + 0]
    assert sims[0] == pytest.approx(bag_of_words(f"{node['name']} {node['text']}") @ bag_of_words(text))
    with pytest.raises(DataError, match="no vector for query 999"):
        kb.similarities(Query(999, "unknown", ()))


def test_without_embeddings_tfidf_finds_the_named_entities(tmp_path):
    _, kb_dir = write_synthetic_stark(tmp_path, embeddings=False)
    kb = LocalKnowledgeBase(kb_dir)
    assert kb.similarity_kind == "tfidf"
    sims = kb.similarities(Query(1, "Which drug treats Telmic fever?", ()))
    best = [kb.node_ids[i] for i in np.argsort(-sims)[:2]]
    assert DISEASE_ID + 1 in best  # the node named in the query ranks on top


@pytest.mark.parametrize(
    "line, problem",
    [('{"id": 1, "name": "x"}', "line 2.*missing field"), ('{"id": "a", "name": "x", "type": "t"}', "line 2.*integer"),
     ('{"id": 1, "name": "x", "type": "t", "relations": {"r": ["b"]}}', "line 2.*relations"), ("not json", "line 2")],
)
def test_malformed_node_lines_are_reported(tmp_path, line, problem):
    (tmp_path / "nodes.jsonl").write_text('{"id": 0, "name": "ok", "type": "t"}\n' + line + "\n")
    with pytest.raises(DataError, match=problem):
        LocalKnowledgeBase(tmp_path)


def test_kb_dir_problems_name_the_fix(tmp_path):
    with pytest.raises(DataError, match="no nodes.jsonl.*README"):
        LocalKnowledgeBase(tmp_path)
    (tmp_path / "nodes.jsonl").write_text('{"id": 0, "name": "a", "type": "t", "relations": {"r": [7]}}\n')
    with pytest.raises(DataError, match="unknown node 7"):
        LocalKnowledgeBase(tmp_path)
