"""Tiny random models built from scratch in seconds, no download: a 2-layer Llama chat model (with a LoRA adapter)
and a 2-layer BERT (or Llama) encoder. `optimas device-check` runs the project's code paths on them, and the
tests use them for the LM layer and the local reward model.

The chat model's tokenizer is a byte-level BPE trained in-process on a small English corpus, with ChatML special
tokens and chat template (the same format as SmolLM2), so prompts go through exactly the code path of the real
local model. Weights are random but seeded: outputs are gibberish, yet deterministic.
"""
from __future__ import annotations

from pathlib import Path

CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Question: what is the capital of France? Answer: Paris.",
    "A compound AI system chains several language model calls, retrievers and tools.",
    "Local reward functions score each component's output so that it aligns with the global reward.",
    "You are a helpful assistant. Answer briefly and precisely.",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000. Yes, no, maybe.",
]


def build_tiny_chat_model(folder: str | Path, seed: int = 0) -> Path:
    """Write a 2-layer random Llama with a ChatML tokenizer into `folder`; returns the folder."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(_CORPUS * 20, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token="<|im_start|>", eos_token="<|im_end|>", pad_token="<|im_end|>",
        unk_token="<|endoftext|>",
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    tokenizer.save_pretrained(folder)

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def build_tiny_lora_adapter(base_folder: str | Path, folder: str | Path, seed: int = 1) -> Path:
    """A LoRA adapter for the tiny model with random, non-zero weights (so it changes the outputs)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(base_folder)
    # init_lora_weights=False: B is random instead of zero, so the adapter is not a no-op.
    config = LoraConfig(r=4, lora_alpha=64, target_modules=["q_proj", "v_proj", "o_proj"], init_lora_weights=False)
    get_peft_model(base, config).save_pretrained(folder)
    return Path(folder)


BERT_CORPUS = [
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
    words = sorted({w for line in BERT_CORPUS for w in line.split()})
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
