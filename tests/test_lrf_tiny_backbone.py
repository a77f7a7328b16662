"""A tiny real BERT encoder (random weights, WordPiece tokenizer built here) for fast LRF tests.

Other test_lrf_* modules import `build_tiny_bert` from here; the test below checks that the built
folder loads as an LRF backbone the same way any Hugging Face folder does.
"""
from __future__ import annotations

from pathlib import Path

CORPUS = [
    "component answer question context output input role retriever generator verifier passage",
    "the capital of france is paris and the capital of italy is rome",
    "shakespeare wrote hamlet and marlowe wrote faustus in english",
    "keyword correct wrong right answer good bad yes no maybe",
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda",
    "red green blue yellow orange purple black white grey brown",
    "one two three four five six seven eight nine ten",
    "the model chooses a passage and writes an answer for the question",
] * 4


def build_tiny_bert(folder: Path, causal: bool = False) -> str:
    """Save a 2-layer, 32-wide BERT (or, with causal=True, Llama) and its tokenizer into `folder`."""
    import torch
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import BertConfig, BertModel, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    # The vocabulary is listed, not trained: WordPiece training breaks ties differently in every process,
    # which made the tiny LRF (and the runs built on it) differ from one test session to the next.
    words = sorted({w for line in CORPUS for w in line.split()})
    chars = sorted({c for w in words for c in w})
    vocab = specials + chars + [f"##{c}" for c in chars] + [w for w in words if len(w) > 1]
    tok = Tokenizer(models.WordPiece({token: i for i, token in enumerate(vocab)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]", eos_token="[SEP]", model_max_length=128,
    )
    torch.manual_seed(0)
    if causal:
        config = LlamaConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=128,
                             pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
        LlamaForCausalLM(config).save_pretrained(folder)
    else:
        config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                            num_attention_heads=2, max_position_embeddings=128, pad_token_id=tokenizer.pad_token_id)
        BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def test_tiny_bert_and_tiny_llama_load_as_backbones(tmp_path):
    from optimas_cli.lrf.model import LocalRewardModel

    enc = LocalRewardModel(build_tiny_bert(tmp_path / "bert"), {"gen": "writes the answer"}, device="cpu")
    dec = LocalRewardModel(build_tiny_bert(tmp_path / "llama", causal=True), {"gen": "writes the answer"}, device="cpu")
    assert (enc.is_causal, enc.pooling, enc.hidden_size) == (False, "mean", 32)
    assert (dec.is_causal, dec.pooling) == (True, "last")
    for model in (enc, dec):
        scores = model.score("gen", [{"question": "capital of france"}] * 2, [{"answer": "paris"}, {"answer": "rome"}])
        assert len(scores) == 2 and scores[0] != scores[1]
