"""The client sends a batch's local calls shortest prompt first, and that changes no output.

The local batcher pads a batch to its longest prompt and caps rows x (longest prompt + max_tokens): calls
of like lengths side by side pad less and fit more rows per batch. Only the order of generation moves:
the cache keys, and each call's text, stay.
"""
from __future__ import annotations

from optimas_cli.lm.client import LMClient
from optimas_cli.lm.local.provider import LOCAL_PROVIDER
from optimas_cli.lm.local.registry import model_name
from optimas_cli.lm.types import LMRequest

WORDS = "the user viewed a red kettle then a blue teapot and some mugs".split()


def chat(n_words: int) -> list[dict]:
    return [{"role": "user", "content": " ".join(WORDS[i % len(WORDS)] for i in range(n_words))}]


LENGTHS = [40, 3, 25, 9, 60, 1]  # words per prompt, in request order: long and short mixed


def record_send_order(lm: LMClient) -> list[int]:
    """The words of each prompt, in the order the client sends them to generation."""
    sent = []
    generate_one = lm._call_with_retries

    def recording(job, batch_hint, stop=None):
        sent.append(len(job[0].messages[0]["content"].split()))
        return generate_one(job, batch_hint, stop)

    lm._call_with_retries = recording
    return sent


def test_local_calls_go_out_shortest_prompt_first_and_come_back_in_request_order(tiny_model):
    lm = LMClient(model=tiny_model, temperature=0.0, max_tokens=4, concurrency=1, cache=False)
    sent = record_send_order(lm)
    responses = lm.complete([LMRequest(chat(n)) for n in LENGTHS])
    assert sent == sorted(LENGTHS)
    model = LOCAL_PROVIDER.model(model_name(tiny_model))
    prompt_tokens = [model.prompt_tokens(model.render(chat(n))) for n in LENGTHS]
    assert [r.prompt_tokens for r in responses] == prompt_tokens  # each response is its own request's


def test_api_calls_keep_request_order(tiny_model):
    lm = LMClient(model="openai/gpt-4o-mini", temperature=0.0, max_tokens=4, concurrency=1, cache=False,
                  mock_response="1")
    sent = record_send_order(lm)
    lm.complete([LMRequest(chat(n)) for n in LENGTHS])
    assert sent == LENGTHS  # nothing is batched here: no tokenizer is loaded to order them


def test_reordered_batches_under_a_token_cap_give_each_call_its_own_output(tiny_model):
    requests = [LMRequest(chat(n)) for n in LENGTHS] + [LMRequest(chat(n), temperature=1.0, seed=3, sample_index=2)
                                                         for n in LENGTHS]
    alone = [LMClient(model=tiny_model, max_tokens=6, concurrency=1, cache=False).complete([r])[0].texts[0]
             for r in requests]
    model = LOCAL_PROVIDER.model(model_name(tiny_model))
    longest = max(model.prompt_tokens(model.render(chat(n))) for n in LENGTHS)
    cap = LOCAL_PROVIDER.max_batch_tokens
    try:
        LOCAL_PROVIDER.configure(max_batch_tokens=3 * (longest + 6))  # several batches, each padded
        together = LMClient(model=tiny_model, max_tokens=6, concurrency=16, cache=False).complete(requests)
    finally:
        LOCAL_PROVIDER.configure(max_batch_tokens=cap)
    assert [r.texts[0] for r in together] == alone
