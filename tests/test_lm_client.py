"""LMClient on the API path (litellm's mock_response), retries, key errors, usage, and the lm configs."""
from __future__ import annotations

from pathlib import Path

import litellm
import pytest
from omegaconf import OmegaConf

from optimas_cli.errors import LMCallFailed, UserError
from optimas_cli.lm.client import LMClient, build_lm
from optimas_cli.lm.types import LMRequest

CONF = Path(__file__).resolve().parents[1] / "conf" / "lm"
CHAT = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture
def openai_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")


def test_api_model_answers_through_litellm_and_costs_are_counted(openai_key, tmp_path):
    lm = LMClient(model="gpt-4o-mini", mock_response="Paris", cache_dir=str(tmp_path), concurrency=4)
    responses = lm.complete([LMRequest(CHAT), LMRequest(CHAT, max_tokens=3, temperature=0.7, seed=1, n=2)],
                            component="answer")
    assert [r.texts for r in responses] == [["Paris"], ["Paris", "Paris"]]
    usage = lm.usage.to_dict()
    assert usage["by_component"]["answer"]["calls"] == 3
    assert usage["total"]["prompt_tokens"] > 0 and usage["total"]["completion_tokens"] > 0
    assert usage["total"]["cost"] > 0  # from litellm's bundled cost map
    assert usage["total"]["tokens"] == usage["total"]["prompt_tokens"] + usage["total"]["completion_tokens"]


def test_a_missing_api_key_names_the_variable(monkeypatch, tmp_path):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    lm = LMClient(model="gpt-4o-mini", cache_dir=str(tmp_path))
    with pytest.raises(UserError, match="OPENAI_API_KEY"):
        lm.complete([LMRequest(CHAT)])
    monkeypatch.delenv("MY_SERVER_KEY", raising=False)
    server = LMClient(model="hosted_vllm/some-model", api_base="http://127.0.0.1:9/v1",
                      api_key_env="MY_SERVER_KEY", cache_dir=str(tmp_path))
    with pytest.raises(UserError, match="MY_SERVER_KEY"):
        server.complete([LMRequest(CHAT)])


def test_rate_limits_are_retried_with_backoff_then_succeed(openai_key, monkeypatch, tmp_path):
    real, attempts = litellm.completion, []

    def flaky(**kwargs):
        attempts.append(kwargs)
        if len(attempts) <= 2:
            raise litellm.RateLimitError(message="slow down", llm_provider="openai", model=kwargs["model"])
        return real(**kwargs)

    monkeypatch.setattr(litellm, "completion", flaky)
    lm = LMClient(model="gpt-4o-mini", mock_response="ok", cache=False, max_retries=3, retry_base_seconds=0.01)
    assert lm.complete([LMRequest(CHAT)])[0].texts == ["ok"]
    assert len(attempts) == 3 and all(a["num_retries"] == 0 for a in attempts)


def test_retries_give_up_after_max_retries_and_bad_requests_are_not_retried(openai_key, monkeypatch):
    attempts = []

    def always(error):
        def fail(**kwargs):
            attempts.append(1)
            raise error
        return fail

    lm = LMClient(model="gpt-4o-mini", mock_response="ok", cache=False, max_retries=2, retry_base_seconds=0.01)
    monkeypatch.setattr(litellm, "completion", always(
        litellm.ServiceUnavailableError(message="down", llm_provider="openai", model="gpt-4o-mini")))
    with pytest.raises(LMCallFailed, match=r"'gpt-4o-mini' answered HTTP 503 \(after 3 tries\)"):
        lm.complete([LMRequest(CHAT)])
    assert len(attempts) == 3
    attempts.clear()
    monkeypatch.setattr(litellm, "completion", always(
        litellm.BadRequestError(message="bad", llm_provider="openai", model="gpt-4o-mini")))
    with pytest.raises(LMCallFailed, match="refused the request"):
        lm.complete([LMRequest(CHAT)])
    assert len(attempts) == 1


def test_a_rejected_key_is_a_user_error(openai_key, monkeypatch):
    def reject(**kwargs):
        raise litellm.AuthenticationError(message="invalid key", llm_provider="openai", model="gpt-4o-mini")

    monkeypatch.setattr(litellm, "completion", reject)
    lm = LMClient(model="gpt-4o-mini", api_key_env="OPENAI_API_KEY", cache=False)
    with pytest.raises(UserError, match="OPENAI_API_KEY"):
        lm.complete([LMRequest(CHAT)])


def test_cached_api_calls_cost_nothing_the_second_time(openai_key, tmp_path):
    lm = LMClient(model="gpt-4o-mini", mock_response="Paris", cache_dir=str(tmp_path))
    lm.complete([LMRequest(CHAT)], component="a")
    lm.complete([LMRequest(CHAT)], component="b")
    usage = lm.usage.to_dict()["by_component"]
    assert usage["a"]["cache_hits"] == 0 and usage["a"]["cost"] > 0
    assert usage["b"] == {**usage["b"], "calls": 1, "cache_hits": 1, "tokens": 0, "cost": 0.0}


def test_an_adapter_on_an_api_model_is_a_user_error(openai_key, tmp_path):
    lm = LMClient(model="gpt-4o-mini", mock_response="x", cache=False)
    with pytest.raises(UserError, match="adapters apply only to local models"):
        lm.complete([LMRequest(CHAT, adapter=str(tmp_path))])


@pytest.mark.parametrize("name", ["local", "openai", "anthropic", "vllm"])
def test_every_lm_config_builds_a_client(name, tmp_path):
    cfg = OmegaConf.load(CONF / f"{name}.yaml")
    cfg.cache_dir = str(tmp_path)
    lm = build_lm(cfg)
    assert lm.model == cfg.model and lm.max_tokens == cfg.max_tokens and lm.temperature == cfg.temperature
    assert lm.cache is not None and lm.cache.path.parent == tmp_path
    if name == "vllm":
        assert lm.api_base.startswith("http")


def test_build_lm_rejects_unknown_settings_and_accepts_overrides(tmp_path):
    with pytest.raises(UserError, match="unknown lm setting"):
        build_lm({"model": "gpt-4o-mini", "temprature": 0.3})
    lm = build_lm({"model": "gpt-4o-mini", "cache": False}, max_tokens=7)
    assert lm.max_tokens == 7 and lm.cache is None
