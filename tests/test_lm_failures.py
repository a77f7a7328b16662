"""What a user sees when their LM server misbehaves: each failure a real HTTP server returns (stdlib
http.server on 127.0.0.1) is one line naming what, which server and model, and what to do; transient
ones (429, 500, 502, 503, 504, a refused connection, a timeout) are retried first, with the retries
on the terminal. The server check before the first call catches a wrong URL or served name."""
from __future__ import annotations

import time

import pytest

from optimas_cli.errors import LMCallFailed, UserError
from optimas_cli.lm.client import LMClient
from optimas_cli.lm.server_check import check_server
from optimas_cli.lm.types import LMRequest
from tests.fault_server import FaultServer

CHAT = [{"role": "user", "content": "Is the sky blue?"}]
MODEL = "hosted_vllm/served"

# mode -> (words the line must hold, retried?)
FAILURES = {
    "http_500": ("answered HTTP 500", True),
    "http_502": ("answered HTTP 502", True),
    "http_503": ("answered HTTP 503", True),
    "http_504": ("answered HTTP 504", True),
    "http_429": ("kept answering HTTP 429", True),
    "hang": ("did not answer within lm.timeout=1s", True),
    "bad_json": ("did not send a chat completion back: a body that is not valid JSON", False),
    "no_choices": ("did not send a chat completion back: a JSON body without `choices`", False),
    "empty_body": ("did not send a chat completion back: an empty body", False),
}


def client(api_base: str, **kw) -> LMClient:
    settings = dict(model=MODEL, api_base=api_base, cache=False, max_retries=2, retry_base_seconds=0.01,
                    timeout=1.0, concurrency=4)
    return LMClient(**{**settings, **kw})


@pytest.mark.parametrize("mode", sorted(FAILURES))
def test_each_server_failure_is_one_line_naming_server_and_model(mode, capfd):
    words, retried = FAILURES[mode]
    with FaultServer(mode) as server:
        with pytest.raises(LMCallFailed) as caught:
            client(server.api_base).complete([LMRequest(CHAT)])
    message = str(caught.value)
    assert words in message and f"'{MODEL}' at {server.api_base}" in message and " — " in message  # what — fix
    assert "\n" not in message
    assert server.chat_requests == (3 if retried else 1)
    retries = [line for line in capfd.readouterr().err.splitlines() if "retry" in line]
    assert len(retries) == (2 if retried else 0)  # on the terminal, not only in the log
    if retried:
        assert retries[0].startswith("optimas: ") and "retry 1/2 in" in retries[0]


def test_a_refused_connection_says_start_the_server(capfd):
    with FaultServer() as server:
        api_base = server.api_base
    with pytest.raises(LMCallFailed, match=r"cannot connect to the LM server .* connection refused \(after 3 tries\)"
                                           r" — start the server"):
        client(api_base).complete([LMRequest(CHAT)])
    assert "retry 2/2" in capfd.readouterr().err


def test_a_server_that_recovers_within_the_retries_answers():
    with FaultServer("http_502") as server:
        lm = client(server.api_base, max_retries=5, retry_base_seconds=0.2)
        import threading

        threading.Timer(0.1, lambda: setattr(server, "mode", "good")).start()
        assert lm.complete([LMRequest(CHAT)])[0].texts == ["yes"]
        assert server.chat_requests >= 2


def test_the_first_failure_stops_the_other_parallel_calls():
    """One call that fails for good ends the batch at once: the calls waiting to retry stop waiting."""
    with FaultServer("http_503", script=["http_503"] * 7 + ["bad_json"]) as server:
        lm = client(server.api_base, max_retries=3, retry_base_seconds=5.0, concurrency=8)
        start = time.monotonic()
        with pytest.raises(LMCallFailed, match="not valid JSON"):
            lm.complete([LMRequest([{"role": "user", "content": str(i)}]) for i in range(8)])
        assert time.monotonic() - start < 2.0  # not the 2.5-7.5 s of the first retry pause
        time.sleep(0.5)
    assert server.chat_requests == 8  # nobody retried


def test_a_retry_after_header_is_waited_for(capfd):
    """A 429 with Retry-After: 1 is retried after 1 s, not after the client's own (here 0.01 s) backoff."""
    with FaultServer("good", script=["http_429_retry_after"]) as server:
        start = time.monotonic()
        assert client(server.api_base).complete([LMRequest(CHAT)])[0].texts == ["yes"]
        waited = time.monotonic() - start
    assert server.chat_requests == 2 and waited >= 1.0
    assert "retry 1/2 in 1.0s (the server asked for Retry-After: 1s)" in capfd.readouterr().err


def test_a_retry_after_longer_than_the_timeout_waits_the_timeout(capfd):
    with FaultServer("good", script=["http_429_retry_after"]) as server:
        assert client(server.api_base, timeout=0.4).complete([LMRequest(CHAT)])[0].texts == ["yes"]
    assert "retry 1/2 in 0.4s (the server asked for Retry-After: 1s)" in capfd.readouterr().err


# -- the check before the first call -------------------------------------------------------------
def test_the_server_check_passes_for_a_served_model():
    with FaultServer(models=("served", "other")) as server:
        check_server(server.api_base, MODEL)
        check_server(server.api_base, "hosted_vllm/other")
        check_server(server.api_base, "gpt-4o-mini")  # not an OpenAI-compatible server's model: nothing to check


@pytest.mark.parametrize("case, words", [
    ("wrong_model", "does not serve 'typo' (it serves: served) — set lm.model=hosted_vllm/served"),
    ("refused", "cannot reach the LM server at"),
    ("wrong_path", "answered GET /models with HTTP 404"),
    ("hang", "did not answer GET /models within 0.5s"),
])
def test_the_server_check_fails_in_one_line(case, words):
    with FaultServer("hang" if case == "hang" else "good") as server:
        api_base = server.api_base
        model = "hosted_vllm/typo" if case == "wrong_model" else MODEL
        if case == "wrong_path":
            api_base = api_base.removesuffix("/v1") + "/nope"
        if case == "refused":
            server.__exit__()
        with pytest.raises(UserError) as caught:
            check_server(api_base, model, timeout=0.5)
    assert words in str(caught.value) and "\n" not in str(caught.value)
