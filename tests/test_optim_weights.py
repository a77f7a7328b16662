"""Weights optimizer: real GRPO steps on a tiny random causal LM with a tiny local reward."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from optimas_cli.errors import UserError
from optimas_cli.optim import optimize_component, weights
from optimas_cli.system.component import Component, ConfigKind
from optimas_cli.system.context import RunContext
from optimas_cli.system.ledger import RunLedger

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}"
)
CORPUS = [
    "the cat sat on a mat and ate an apple",
    "a small model answers every question with a short answer",
    "reviews say the product is good or bad and the user buys it",
] * 20


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A 2-layer Llama with a word-level tokenizer trained here: random weights, real architecture."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<pad>", "<s>", "<|end|>", "<|user|>", "<|system|>", "<|assistant|>"]
    tok = Tokenizer(models.WordLevel(unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.train_from_iterator(CORPUS, trainers.WordLevelTrainer(special_tokens=specials))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="<|end|>", unk_token="<pad>"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=128,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    folder = tmp_path_factory.mktemp("tiny-llama")
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


class Reviewer(Component):
    """A weights-kind component: a local LM (base + LoRA adapter) writes a verdict for a review."""

    def __init__(self, base: str):
        super().__init__(
            name="reviewer", description="judges a review", inputs=("review",), outputs=("verdict",),
            kind=ConfigKind.WEIGHTS,
        )
        self.base = base
        self.forward_calls = 0

    def base_model_path(self) -> str:
        return self.base

    def build_messages(self, inputs: dict, value) -> list[dict]:
        return [{"role": "user", "content": inputs["review"]}]

    def parse_output(self, text: str) -> dict:
        return {"verdict": text.strip()}

    def forward(self, inputs, value, ctx):
        # Stands in for the LM layer serving base + adapter: greedy generation through peft.
        from peft import PeftModel
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.forward_calls += 1
        tokenizer = AutoTokenizer.from_pretrained(self.base)
        model = AutoModelForCausalLM.from_pretrained(self.base)
        if value:
            model = PeftModel.from_pretrained(model, value)
        outs = []
        for x in inputs:
            ids = tokenizer.apply_chat_template(
                self.build_messages(x, value), add_generation_prompt=True, return_tensors="pt", return_dict=True
            )
            gen = model.generate(**ids, max_new_tokens=8, do_sample=False)
            outs.append(self.parse_output(tokenizer.decode(gen[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)))
        return outs


class LetterReward:
    """r_k: the share of characters that are 'a' — varies between random completions, so the
    GRPO advantages are non-zero and a step must move the adapter."""

    def __init__(self):
        self.calls = 0

    def score(self, name, inputs, outputs):
        self.calls += 1
        return [o["verdict"].count("a") / max(1, len(o["verdict"])) for o in outputs]


SEARCH = [{"review": "the product is good"}, {"review": "the cat ate a bad apple"}, {"review": "a short answer"}]
SETTINGS = {"steps": 2, "prompts_per_step": 1, "num_generations": 4, "max_completion_length": 8, "learning_rate": 1e-2}


def _lora_tensors(folder) -> dict[str, torch.Tensor]:
    return load_file(f"{folder}/adapter_model.safetensors")


def test_grpo_steps_train_a_fresh_adapter_then_continue_it(tiny_model, tmp_path):
    component, lrf = Reviewer(tiny_model), LetterReward()
    ctx = RunContext(ledger=RunLedger(1), phase="local_optimization", seed=3)
    cfg = {"weights": {**SETTINGS, "work_dir": str(tmp_path / "adapters")}}

    first = optimize_component(component, None, SEARCH, lrf, ctx, cfg)
    tensors = _lora_tensors(first.value)
    lora_b = [t for k, t in tensors.items() if "lora_B" in k]
    assert lora_b and any(t.abs().sum() > 0 for t in lora_b), "LoRA B starts at zero; a GRPO step must move it"
    log = json.loads(open(f"{first.value}/optimas_adapter.json").read())
    assert log["algorithm"] == "GRPO" and len(log["train_rewards"]) == 2
    assert first.local_score is not None and first.baseline_score is not None
    assert ctx.ledger.executions["local_optimization"]["reviewer"] == 2 * len(SEARCH)

    second = optimize_component(component, first.value, SEARCH, lrf, ctx, cfg)
    assert second.value != first.value and second.details["parent_adapter"] == first.value
    after = _lora_tensors(second.value)
    assert after.keys() == tensors.keys()
    assert any(not torch.equal(tensors[k], after[k]) for k in tensors), "continuing the adapter must change it"


def test_weights_component_without_the_contract_is_a_user_error(tiny_model, tmp_path):
    bare = Component(name="bare", description="x", inputs=("a",), outputs=("b",), kind=ConfigKind.WEIGHTS)
    ctx = RunContext(ledger=RunLedger(1))
    with pytest.raises(UserError, match="build_messages"):
        weights.propose(bare, None, SEARCH, LetterReward(), ctx, {"work_dir": str(tmp_path)})
    with pytest.raises(UserError, match="work_dir"):
        weights.propose(Reviewer(tiny_model), None, SEARCH, LetterReward(), ctx, {})


def test_base_model_must_be_a_model_folder_or_a_shipped_model(tmp_path):
    with pytest.raises(UserError, match="neither a transformers folder"):
        weights.resolve_base_model(str(tmp_path))
    with pytest.raises(UserError, match="local/smollm2-135m-instruct"):
        weights.resolve_base_model("local/no-such-model")
