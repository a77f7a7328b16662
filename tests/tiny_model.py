"""A tiny random Llama chat model built from scratch in a few seconds, for tests of the LM layer.

The tokenizer is a byte-level BPE trained in-process with `tokenizers` on a small English corpus,
with ChatML special tokens and chat template (the same format as SmolLM2), so prompts go through
exactly the code path of the real local model. Weights are random but seeded: outputs are gibberish,
yet deterministic, which is all the tests need.
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
