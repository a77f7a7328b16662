"""Before the first call to a self-hosted OpenAI-compatible server: does it answer, and does it serve
the model the run names? One GET of `<api_base>/models`, so a wrong URL, a stopped server or a typo in
the served name is one line before anything is spent, not a traceback after the first batch."""
from __future__ import annotations

import json
import urllib.error
import urllib.request

from optimas_cli.errors import UserError

# litellm prefixes that talk the OpenAI protocol to `api_base`; the rest of the name is the served model.
OPENAI_COMPATIBLE = ("hosted_vllm/", "openai/")
CHECK_TIMEOUT = 10.0  # seconds: a server that takes longer to list its models is not ready for a run


def served_name(model: str) -> str | None:
    """The name the server knows `model` by, or None when it is not an OpenAI-compatible server's model."""
    for prefix in OPENAI_COMPATIBLE:
        if model.startswith(prefix):
            return model[len(prefix):]
    return None


def check_server(api_base: str, model: str, api_key: str | None = None, timeout: float = CHECK_TIMEOUT) -> None:
    """Raise a one-line UserError unless the server at `api_base` answers and lists `model`."""
    name = served_name(model)
    if name is None:
        return
    url = api_base.rstrip("/") + "/models"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:  # noqa: S310 - the user's own server
            body = reply.read()
    except urllib.error.HTTPError as error:
        fix = ("check lm.api_key_env (the server wants a key)" if error.code in (401, 403) else
               "lm.api_base should be the server's OpenAI-compatible URL, e.g. http://host:8000/v1")
        raise UserError(f"the LM server at {api_base} answered GET /models with HTTP {error.code}", fix) from None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        if isinstance(reason, TimeoutError):
            raise UserError(f"the LM server at {api_base} did not answer GET /models within {timeout:g}s",
                            "check that it has finished starting and is not hung") from None
        raise UserError(f"cannot reach the LM server at {api_base} ({_reason(reason)})",
                        "start the server, or point lm.api_base at it (e.g. lm.api_base=http://host:8000/v1)") from None
    try:
        served = [str(entry["id"]) for entry in json.loads(body)["data"]]
    except (ValueError, KeyError, TypeError):
        raise UserError(f"{url} did not list models the OpenAI way (no JSON `data` list)",
                        "lm.api_base should be an OpenAI-compatible server's URL, e.g. http://host:8000/v1") from None
    if name not in served:
        prefix = model[: len(model) - len(name)]
        shown = ", ".join(served[:5]) + (" ..." if len(served) > 5 else "")
        raise UserError(f"the LM server at {api_base} does not serve {name!r} (it serves: {shown or 'nothing'})",
                        f"set lm.model={prefix}{served[0]}" if served else "load a model on the server")


def _reason(reason) -> str:
    text = str(getattr(reason, "strerror", None) or reason)
    return text.lower() if text else type(reason).__name__
