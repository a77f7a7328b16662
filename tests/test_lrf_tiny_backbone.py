"""A tiny real BERT encoder (random weights, WordPiece tokenizer; optimas_cli/flows/tiny_models.py) for fast LRF
tests.

Other test_lrf_* modules import `build_tiny_bert` from here; the test below checks that the built
folder loads as an LRF backbone the same way any Hugging Face folder does.
"""
from __future__ import annotations

from optimas_cli.flows.tiny_models import build_tiny_bert


def test_tiny_bert_and_tiny_llama_load_as_backbones(tmp_path):
    from optimas_cli.lrf.model import LocalRewardModel

    enc = LocalRewardModel(build_tiny_bert(tmp_path / "bert"), {"gen": "writes the answer"}, device="cpu")
    dec = LocalRewardModel(build_tiny_bert(tmp_path / "llama", causal=True), {"gen": "writes the answer"}, device="cpu")
    assert (enc.is_causal, enc.pooling, enc.hidden_size) == (False, "mean", 32)
    assert (dec.is_causal, dec.pooling) == (True, "last")
    for model in (enc, dec):
        scores = model.score("gen", [{"question": "capital of france"}] * 2, [{"answer": "paris"}, {"answer": "rome"}])
        assert len(scores) == 2 and scores[0] != scores[1]
