"""What goes wrong talking to an LM API or server, said in one line: what happened, which server and
model, and what to do. Also which failures are worth another try, and the retry notices on the terminal."""
from __future__ import annotations

import email.utils
import sys
import threading
import time

import litellm

from optimas_cli.errors import LMCallFailed

# Worth another try after a pause: the server or the network may be back, the rate limit lifted.
# HTTP 502 (a proxy in front of a restarting server) counts like 500 and 503; litellm maps 504 to Timeout.
TRANSIENT_ERRORS = (
    litellm.RateLimitError,
    litellm.Timeout,
    litellm.APIConnectionError,
    litellm.ServiceUnavailableError,
    litellm.InternalServerError,
    litellm.BadGatewayError,
)


# What httpx says when the server closes the socket before its reply is whole (a crash, a restart, a proxy
# cutting the request): litellm reports it as HTTP 500, which the server never sent.
DROPPED = ("server disconnected without sending a response", "peer closed connection without sending complete")


def where(model: str, api_base: str | None) -> str:
    return f"{model!r} at {api_base}" if api_base else repr(model)


def _detail(error: BaseException) -> str:
    """The provider's own words, first line, without litellm's class-name prefixes."""
    text = str(getattr(error, "message", None) or error).strip()
    for prefix in ("litellm.", type(error).__name__ + ":", "Hosted_vllmException -", "OpenAIException -"):
        text = text.split(prefix, 1)[-1].strip() if prefix in text[:80] else text
    first = text.splitlines()[0] if text else type(error).__name__
    return first[:160]


def failure(error: BaseException, model: str, api_base: str | None, tries: int, timeout: float | None) -> LMCallFailed:
    """The one-line error for a call that failed after `tries` attempts."""
    at = where(model, api_base)
    after = f" (after {tries} tries)" if tries > 1 else ""
    status = getattr(error, "status_code", None)
    detail = _detail(error)
    if "connection refused" in detail.lower() or "connecterror" in detail.lower().replace(" ", ""):
        return LMCallFailed(f"cannot connect to the LM server for {at}: connection refused{after}",
                            "start the server (or fix lm.api_base)")
    if isinstance(error, litellm.RateLimitError):
        return LMCallFailed(f"{at} kept answering HTTP 429 (rate limited){after}",
                            "lower lm.concurrency or raise lm.retry_base_seconds / lm.max_retries")
    if isinstance(error, litellm.Timeout) and status != 504:
        return LMCallFailed(f"{at} did not answer within lm.timeout={timeout:g}s{after}",
                            "check that the server is up and not overloaded, or raise lm.timeout for long generations")
    if any(words in detail.lower() for words in DROPPED):
        return LMCallFailed(f"{at} dropped the connection before its reply was complete{after}: {detail}",
                            "check the server's log (did it crash or restart?) and any proxy in front of it")
    if isinstance(error, TRANSIENT_ERRORS):
        code = f"HTTP {status}" if status else type(error).__name__
        return LMCallFailed(f"{at} answered {code}{after}: {detail}", "check the server's log")
    if isinstance(error, litellm.NotFoundError):
        return LMCallFailed(f"{at} answered HTTP 404: {detail}",
                            "check lm.api_base (an OpenAI-compatible server's URL ends in /v1) and lm.model")
    if isinstance(error, litellm.BadRequestError):
        return LMCallFailed(f"{at} refused the request (HTTP 400): {detail}",
                            "check that lm.model names a model the server serves (GET <api_base>/models)")
    if isinstance(error, litellm.APIError) or isinstance(error, ValueError):
        return LMCallFailed(f"{at} did not send a chat completion back: {_shape(error, detail)}",
                            "check that lm.api_base points at an OpenAI-compatible /v1 endpoint")
    return LMCallFailed(f"the call to {at} failed: {type(error).__name__}: {detail}", None)


def retry_after(error: BaseException) -> float | None:
    """The seconds a server asked us to wait (its Retry-After header: seconds or an HTTP date), or None."""
    for headers in (getattr(error, "litellm_response_headers", None),
                    getattr(getattr(error, "response", None), "headers", None)):
        value = {str(k).lower(): v for k, v in dict(headers or {}).items()}.get("retry-after")
        if value is None:
            continue
        try:
            return max(0.0, float(value))
        except ValueError:
            when = email.utils.parsedate_tz(str(value))
            if when is not None:
                return max(0.0, email.utils.mktime_tz(when) - time.time())
    return None


def _shape(error: BaseException, detail: str) -> str:
    """What was wrong with the reply, in words (litellm's messages quote the raw body)."""
    raw = str(getattr(error, "message", None) or error)
    if "Original Response:" in raw and not raw.split("Original Response:", 1)[1].strip():
        return "an empty body"
    if "no 'choices'" in raw:
        return "a JSON body without `choices`"
    if "json" in raw.lower():
        return "a body that is not valid JSON"
    return detail


class RetryNotices:
    """Retry lines on the terminal (stderr), not only in the log: a person watching a run sees that it
    waits and why. Many parallel calls fail together; one line per distinct message every few seconds."""

    def __init__(self, every_seconds: float = 5.0, stream=None):
        self.every_seconds, self.stream = every_seconds, stream
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def say(self, key: str, line: str) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._last.get(key, -1e9) < self.every_seconds:
                return
            self._last[key] = now
        stream = self.stream or sys.stderr
        print(f"optimas: {line}", file=stream, flush=True)


class CallsAborted(Exception):
    """Raised in a worker whose batch has already failed elsewhere: stop retrying, nobody waits for it."""
