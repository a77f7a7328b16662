"""The embedded local provider, on the tiny random Llama: litellm routing, batching, sampling, adapters."""
from __future__ import annotations

import shutil

import litellm
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from optimas_cli.errors import UserError
from optimas_cli.lm.client import LMClient
from optimas_cli.lm.local.model import cut_at_stop
from optimas_cli.lm.local.provider import LOCAL_PROVIDER
from optimas_cli.lm.local.registry import model_name, register_local_model
from optimas_cli.lm.types import LMRequest
from optimas_cli.system import RunContext, RunLedger

QUESTIONS = ["What is the capital of France?", "Name a colour.", "Why?",
             "Answer briefly: how many legs does a dog have, and why do cats purr so much?"]


def chat(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def batch_sizes(model: str) -> list[int]:
    return LOCAL_PROVIDER.batcher(model_name(model)).batch_sizes


def test_litellm_completion_reaches_the_local_provider(tiny_model):
    response = litellm.completion(model=tiny_model, messages=chat("hello"), max_tokens=5, temperature=0)
    assert response.model == tiny_model
    assert isinstance(response.choices[0].message.content, str)
    assert response.usage.prompt_tokens > 0 and 0 < response.usage.completion_tokens <= 5


def test_greedy_output_equals_model_generate_and_does_not_depend_on_the_batch(tiny_model, tiny_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    expected = []
    for question in QUESTIONS:  # one at a time, no padding: the reference
        ids = tokenizer.apply_chat_template(chat(question), add_generation_prompt=True, return_tensors="pt",
                                            return_dict=True)
        with torch.inference_mode():
            out = model.generate(**ids, max_new_tokens=6, do_sample=False, pad_token_id=tokenizer.pad_token_id)
        expected.append(tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True))

    lm = LMClient(model=tiny_model, temperature=0.0, max_tokens=6, cache=False)
    before = len(batch_sizes(tiny_model))
    texts = [r.texts[0] for r in lm.complete([LMRequest(chat(q)) for q in QUESTIONS])]
    assert texts == expected  # left padding and the attention mask leave each row's greedy path intact
    assert batch_sizes(tiny_model)[before:] == [len(QUESTIONS)]


def test_concurrent_requests_are_gathered_into_batches(tiny_model):
    lm = LMClient(model=tiny_model, temperature=0.0, max_tokens=4, concurrency=12, cache=False)
    before = len(batch_sizes(tiny_model))
    responses = lm.complete([LMRequest(chat(f"question number {i}")) for i in range(12)])
    assert len(responses) == 12
    assert batch_sizes(tiny_model)[before:] == [12]


def test_sampling_is_reproducible_per_seed_and_sample_index_whatever_the_batch(tiny_model):
    lm = LMClient(model=tiny_model, temperature=1.0, max_tokens=8, cache=False)
    alone = lm.complete([LMRequest(chat("hi"), seed=7, sample_index=3)])[0].texts[0]
    in_batch = lm.complete([LMRequest(chat(q), seed=7, sample_index=3) for q in ("hi", *QUESTIONS)])[0].texts[0]
    assert alone == in_batch
    others = {lm.complete([LMRequest(chat("hi"), seed=7, sample_index=i)])[0].texts[0] for i in range(4)}
    assert len(others) > 1  # different sample indices give different samples


def test_second_identical_call_is_served_from_the_cache_without_generating(tiny_lm, tiny_model):
    requests = [LMRequest(chat(q)) for q in QUESTIONS[:2]]
    first = tiny_lm.complete(requests, component="reader")
    generated = len(batch_sizes(tiny_model))
    second = tiny_lm.complete(requests, component="reader")
    assert [r.texts for r in second] == [r.texts for r in first]
    assert all(r.cached for r in second) and not any(r.cached for r in first)
    assert len(batch_sizes(tiny_model)) == generated  # nothing generated
    usage = tiny_lm.usage.to_dict()["by_component"]["reader"]
    assert usage["calls"] == 4 and usage["cache_hits"] == 2
    assert tiny_lm.cache.hits == 2


def test_n_samples_at_temperature_are_distinct_cache_entries(tiny_lm):
    [response] = tiny_lm.complete([LMRequest(chat("tell me"), temperature=0.8, n=3, seed=1)])
    assert len(response.texts) == 3 and len(set(response.texts)) == 3
    assert len(tiny_lm.cache) == 3
    [again] = tiny_lm.complete([LMRequest(chat("tell me"), temperature=0.8, n=3, seed=1)])
    assert again.texts == response.texts and again.cached
    [greedy] = tiny_lm.complete([LMRequest(chat("tell me"), temperature=0.0, n=3)])
    assert len(set(greedy.texts)) == 1 and len(tiny_lm.cache) == 4  # greedy samples share one entry


def test_a_lora_adapter_changes_the_output_only_for_its_requests(tiny_model, tiny_adapter_dir):
    lm = LMClient(model=tiny_model, temperature=0.0, max_tokens=8, cache=False)
    prompts = [chat(q) for q in QUESTIONS]
    base = [r.texts[0] for r in lm.complete([LMRequest(p) for p in prompts])]
    adapted = [r.texts[0] for r in lm.complete([LMRequest(p, adapter=str(tiny_adapter_dir)) for p in prompts])]
    assert adapted != base
    assert [r.texts[0] for r in lm.complete([LMRequest(p) for p in prompts])] == base  # base weights restored
    again = [r.texts[0] for r in lm.complete([LMRequest(p, adapter=str(tiny_adapter_dir)) for p in prompts])]
    assert again == adapted
    assert len(LOCAL_PROVIDER.model(model_name(tiny_model))._adapters) == 1  # loaded once, kept


def test_a_folder_without_an_adapter_is_a_user_error(tiny_lm, tmp_path):
    with pytest.raises(UserError, match="adapter_config.json"):
        tiny_lm.complete([LMRequest(chat("x"), adapter=str(tmp_path))])


def test_stop_strings_end_the_text_before_them(tiny_model):
    lm = LMClient(model=tiny_model, temperature=0.0, max_tokens=12, cache=False)
    full = lm.complete([LMRequest(chat("stop test"))])[0].texts[0]
    stop = full[3:5]
    assert stop, f"the tiny model's greedy text is too short to test stops: {full!r}"
    cut = lm.complete([LMRequest(chat("stop test"), stop=[stop])])[0]
    assert cut.texts[0] == full[: full.find(stop)]
    assert cut.extra["finish_reasons"] == ["stop"]
    assert cut_at_stop("a. b. c", ["b.", "c"]) == ("a. ", True)


def test_a_base_model_without_chat_template_gets_a_plain_prompt(tiny_model_dir, tmp_path):
    folder = shutil.copytree(tiny_model_dir, tmp_path / "base")
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    name = register_local_model("tiny-base", folder)
    model = LOCAL_PROVIDER.model(model_name(name))
    assert not model.chat_template
    prompt = model.render([{"role": "system", "content": "Be brief."}, *chat("Hi?")])
    assert prompt == "Be brief.\n\nUser: Hi?\nAssistant:"
    text = litellm.completion(model=name, messages=chat("Hi?"), max_tokens=4, temperature=0).choices[0].message.content
    assert "\nUser:" not in text


def test_run_context_complete_goes_through_the_client(tiny_lm):
    ctx = RunContext(ledger=RunLedger(1), lm=tiny_lm, seed=3)
    texts = ctx.complete("answerer", [chat("a"), chat("b")], max_tokens=4)
    assert len(texts) == 2 and all(isinstance(t, str) for t in texts)
    sampled = ctx.replace(temperature=0.9, sample_index=1).complete("answerer", [chat("a")])
    assert isinstance(sampled[0], str)
    assert tiny_lm.usage.to_dict()["by_component"]["answerer"]["calls"] == 3


def test_a_model_folder_can_be_named_by_its_absolute_path(tiny_model_dir, tiny_model):
    response = litellm.completion(model=f"local/{tiny_model_dir}", messages=chat("hello"), max_tokens=3, temperature=0)
    named = litellm.completion(model=tiny_model, messages=chat("hello"), max_tokens=3, temperature=0)
    assert response.choices[0].message.content == named.choices[0].message.content
    with pytest.raises(UserError, match="unknown local model"):
        LMClient(model="local/no-such-model", cache=False).complete([LMRequest(chat("x"))])


def test_the_provider_caps_each_prefill_and_the_rows_decoding_together_by_their_tokens(tiny_model):
    model = LOCAL_PROVIDER.model(model_name(tiny_model))
    batcher = LOCAL_PROVIDER.batcher(model_name(tiny_model))
    row = model.prompt_tokens(model.render(chat("question number 1"))) + 4  # a row's cost: prompt + max new tokens
    lm = LMClient(model=tiny_model, temperature=0.0, max_tokens=4, concurrency=12, cache=False)
    started, joined, shapes = len(batcher.batch_sizes), len(batcher.join_sizes), []
    caps = {"max_batch_tokens": LOCAL_PROVIDER.max_batch_tokens, "max_live_tokens": LOCAL_PROVIDER.max_live_tokens}
    hook = model.model.model.register_forward_pre_hook(
        lambda module, args, kwargs: shapes.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True)
    try:
        LOCAL_PROVIDER.configure(max_batch_tokens=3 * row, max_live_tokens=5 * row)  # prefill 3 rows, decode 5
        lm.complete([LMRequest(chat(f"question number {i}")) for i in range(1, 10)])
    finally:
        hook.remove()
        LOCAL_PROVIDER.configure(**caps)
    groups = batcher.batch_sizes[started:] + batcher.join_sizes[joined:]
    assert sum(groups) == 9 and max(groups) <= 3
    prefills = [rows for rows, width in shapes if width > 1]
    steps = [rows for rows, width in shapes if width == 1]
    assert max(prefills) <= 3 and 3 < max(steps) <= 5  # rows joined the running batch, up to the live cap
    for setting in ("max_batch_tokens", "max_live_tokens"):
        with pytest.raises(UserError, match=setting):
            LOCAL_PROVIDER.configure(**{setting: 0})


def test_a_local_call_in_another_precision_has_another_cache_key(tiny_model):
    lm = LMClient(model=tiny_model, temperature=0.0, max_tokens=4, cache=False)
    request = LMRequest(chat("Name a colour."))
    assert LOCAL_PROVIDER.precision() == "float32"  # auto on a CPU
    float32_key = lm._expand(0, request)[0].key
    dtype = LOCAL_PROVIDER.dtype
    try:
        LOCAL_PROVIDER.configure(dtype="bfloat16")
        assert LOCAL_PROVIDER.precision() == "bfloat16"
        assert lm._expand(0, request)[0].key != float32_key  # a float32 reply is never served to a bf16 run
    finally:
        LOCAL_PROVIDER.configure(dtype=dtype)
    assert lm._expand(0, request)[0].key == float32_key
