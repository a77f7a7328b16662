"""Dollars and compute in the ledger: each API call priced from litellm's cost map (or lm.price), a
model without a price reported as unpriced (never $0), local generation charged as compute seconds,
and a call replayed from the cache after a kill counted as the call it was."""
from __future__ import annotations

import time

import litellm
import pytest

from optimas_cli.errors import UserError
from optimas_cli.lm.client import LMClient
from optimas_cli.lm.pricing import CallPrice
from optimas_cli.lm.types import LMRequest

CHAT = [{"role": "user", "content": "What is the capital of France?"}]
PROMPT_TOKENS, COMPLETION_TOKENS = 1200, 300


@pytest.fixture
def fake_litellm(monkeypatch):
    """litellm.completion answering with a response of known usage (and counting the calls it got)."""
    calls = []

    def completion(**kwargs):
        calls.append(kwargs)
        return litellm.ModelResponse(
            model=kwargs["model"], choices=[{"message": {"role": "assistant", "content": "Paris"}, "finish_reason": "stop"}],
            usage={"prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS,
                   "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS},
        )

    monkeypatch.setattr(litellm, "completion", completion)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    return calls


def chats(n):
    return [LMRequest([{"role": "user", "content": f"question {i}"}]) for i in range(n)]


def test_an_api_call_is_priced_from_litellms_cost_map(fake_litellm, tmp_path):
    lm = LMClient(model="gpt-4o-mini", cache_dir=str(tmp_path))
    lm.complete(chats(2), component="answer", phase="test")
    rates = litellm.model_cost["gpt-4o-mini"]
    per_call = PROMPT_TOKENS * rates["input_cost_per_token"] + COMPLETION_TOKENS * rates["output_cost_per_token"]
    usage = lm.usage.to_dict()
    assert usage["total"]["cost"] == pytest.approx(2 * per_call) and per_call > 0
    assert usage["by_phase"]["test"]["cost"] == pytest.approx(2 * per_call)  # per phase as well as per component
    assert usage["by_component"]["answer"]["unpriced"] == 0


def test_a_model_missing_from_the_map_is_unpriced_not_free_unless_the_user_prices_it(fake_litellm, tmp_path):
    server = dict(model="hosted_vllm/my-finetune", api_base="http://127.0.0.1:9/v1", cache=False)
    lm = LMClient(**server, cache_dir=str(tmp_path))
    lm.complete(chats(3), component="answer")
    total = lm.usage.to_dict()["total"]
    assert (total["unpriced"], total["cost"], total["tokens"]) == (3, 0.0, 3 * (PROMPT_TOKENS + COMPLETION_TOKENS))

    priced = LMClient(**server, cache_dir=str(tmp_path), price={"input_per_mtok": 0.5, "output_per_mtok": 2.0})
    priced.complete(chats(3), component="answer")
    total = priced.usage.to_dict()["total"]
    assert total["unpriced"] == 0
    assert total["cost"] == pytest.approx(3 * (PROMPT_TOKENS * 0.5 + COMPLETION_TOKENS * 2.0) / 1e6)


@pytest.mark.parametrize("price, message", [
    ({"input_per_mtok": -1, "output_per_mtok": 1}, "must not be negative"),
    ({"input_per_mtok": "cheap", "output_per_mtok": 1}, "must be a number"),
    ({"input_per_mtok": 1}, "needs both"),
])
def test_bad_prices_are_one_clear_error(price, message):
    with pytest.raises(UserError, match=message):
        CallPrice.from_config(price)


def test_a_call_replayed_from_the_cache_after_a_kill_is_counted_as_it_happened(fake_litellm, tmp_path):
    killed = LMClient(model="gpt-4o-mini", cache_dir=str(tmp_path))
    killed.attach_run("runs/a")
    killed.complete(chats(2), component="answer")  # before the last checkpoint: in the saved accounts
    checkpoint = time.time()
    killed.complete(chats(4)[2:], component="answer")  # after it: lost with the process
    other_run = LMClient(model="gpt-4o-mini", cache_dir=str(tmp_path))
    other_run.attach_run("runs/b")
    other_run.complete([LMRequest([{"role": "user", "content": "another run's question"}])], component="answer")
    generated = len(fake_litellm)

    resumed = LMClient(model="gpt-4o-mini", cache_dir=str(tmp_path))
    resumed.attach_run("runs/a", checkpoint)
    resumed.complete(chats(4) + [LMRequest([{"role": "user", "content": "another run's question"}])], component="answer")
    assert len(fake_litellm) == generated  # nothing generated again
    row = resumed.usage.to_dict()["total"]
    # the two calls made after the checkpoint count as generated; the earlier two and the other run's are hits
    assert (row["calls"], row["cache_hits"]) == (5, 3)
    assert row["tokens"] == 2 * (PROMPT_TOKENS + COMPLETION_TOKENS)
    assert row["cost"] == pytest.approx(killed.usage.to_dict()["total"]["cost"] / 2)
    resumed.complete(chats(4), component="answer")  # served again: now plain hits, as in an uninterrupted run
    assert resumed.usage.to_dict()["total"]["tokens"] == 2 * (PROMPT_TOKENS + COMPLETION_TOKENS)


def test_local_generation_is_charged_as_compute_seconds_not_dollars(tiny_lm):
    tiny_lm.complete(chats(3), component="answer")
    total = tiny_lm.usage.to_dict()["total"]
    assert total["compute_seconds"] > 0 and total["cost"] == 0 and total["unpriced"] == 0
