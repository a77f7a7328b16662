"""Before a method spends on sampled diversity: can the run's LM draw two different samples at all?

Preference collection (Stage 1) and HBC's reference runs draw several samples of each input at a
temperature and learn from how they differ. A server that decodes greedily whatever the request's
temperature (`transformers serve` of a folder whose generation_config.json lacks `do_sample: true`, a
proxy that drops `temperature`) returns one answer per input: the collection finds no pair, and the run
ends having spent its budget on copies. So, before the first such call, a few seeded samples of a prompt
that admits many answers go to every remote model the sampled components call, at the method's
temperature and, when those all agree, at temperature 1; identical texts at both stop the run in one
line naming the cause and the fix. The probe's calls bypass the call cache (a cached answer of an
earlier probe would hide a server fixed since) and are counted in the LM usage under `sampling_check`.

The embedded local provider is not probed: it samples by its own seeded Gumbel noise, whatever the
folder's generation defaults (tests/test_served_sampling.py proves it on SmolLM2).
"""
from __future__ import annotations

import copy
import json
import logging
import os
from pathlib import Path

from optimas_cli.errors import UserError
from optimas_cli.lm.local.registry import is_local
from optimas_cli.lm.server_check import check_server, served_name
from optimas_cli.lm.types import LMRequest

log = logging.getLogger("optimas")

PROBE = [{"role": "user", "content": "Invent a name for a pet and say in a few words what kind of animal it is."}]
PROBE_SAMPLES = 4  # seeded samples per temperature: 4 sampled answers to PROBE virtually never all agree
PROBE_TOKENS = 16
FALLBACK_TEMPERATURE = 1.0  # the second try when the first temperature's samples agree
COMPONENT = PHASE = "sampling_check"


def sampled_models(system, temperature: float, run_model: str | None) -> list[str]:
    """The remote models that the components sampled at `temperature` call (a component's own model, else
    the run's), in execution order; local models, LoRA nodes' base models among them, are left out."""
    models = []
    for comp in system.components.values():
        if comp.calls_lm and comp.is_stochastic(temperature):
            own = getattr(comp, "base_model", None) or getattr(comp, "model", None)
            models.append(own if isinstance(own, str) and own else run_model)
    return [m for m in dict.fromkeys(models) if isinstance(m, str) and not is_local(m)]


def check_sampling(system, ctx, temperature: float, what: str, console=None) -> None:
    """Raise a one-line UserError when a model that `what` (e.g. "stage 1's candidates") samples at
    `temperature` returns the same text for every seeded sample; warn when only that temperature is too
    low to vary it. Nothing to check at temperature 0, on local models, or with a test's stand-in LM."""
    if temperature <= 0:
        return
    models = sampled_models(system, temperature, getattr(ctx.lm, "model", None))
    client = _client(ctx.lm) if models else None  # (building the client loads litellm: only when needed)
    if client is None or client.mock_response is not None:
        return
    for model in models:
        _check_model(client, model, float(temperature), int(ctx.seed), what, console)


def _client(lm):
    """The LMClient behind the run's LM (LazyLM builds it now), or None for a test's stand-in."""
    from optimas_cli.lm.client import LMClient

    client = getattr(lm, "client", lm)
    return client if isinstance(client, LMClient) else None


def _check_model(client, model: str, temperature: float, seed: int, what: str, console) -> None:
    if client.api_base:  # first: a stopped server or a wrong served name is its own line
        key = os.environ.get(client.api_key_env) if client.api_key_env else None
        check_server(client.api_base, model, key)
    uncached = copy.copy(client)  # shares the usage ledger and settings, reads and writes no cache row
    uncached.cache = None
    temperatures = list(dict.fromkeys([temperature, max(temperature, FALLBACK_TEMPERATURE)]))
    for at in temperatures:
        requests = [LMRequest(messages=PROBE, model=model, temperature=at, max_tokens=PROBE_TOKENS, seed=seed,
                              sample_index=i) for i in range(PROBE_SAMPLES)]
        texts = {r.texts[0] for r in uncached.complete(requests, component=COMPONENT, phase=PHASE)}
        if len(texts) > 1:
            if at != temperature:
                note = (f"{model} drew {PROBE_SAMPLES} identical samples at temperature {temperature:g} but varied at "
                        f"{at:g}: {what} may all be copies (raise the sampling temperature if they are)")
                log.warning("%s", note)
                if console is not None:
                    console.print(f"[yellow]{note}[/]")
            return
    where = f" at {client.api_base}" if client.api_base else ""
    shown = " and ".join(f"{t:g}" for t in temperatures)
    raise UserError(f"{model}{where} decodes greedily: {PROBE_SAMPLES} seeded samples of an open question at "
                    f"temperature {shown} all came back the same text, so {what} would be copies of one answer "
                    "and nothing would be learnt (stopped before drawing any)", _fix(model))


def _fix(model: str) -> str:
    """How to make the server sample; exact when the served folder is on this machine."""
    name = served_name(model) or model
    config = Path(name).expanduser() / "generation_config.json"
    if config.is_file() and _reads_do_sample(config) is not True:
        return (f"add \"do_sample\": true to {config} (`optimas model-path` does it for the folders it converted) "
                "and restart the server; docs/serving.md")
    return ("make the server sample at the requested temperature: `transformers serve` needs \"do_sample\": true in "
            "the served folder's generation_config.json; vLLM and SGLang sample by default, so check that no proxy or "
            "server setting drops `temperature`, then restart the server; docs/serving.md")


def _reads_do_sample(path: Path):
    try:
        return json.loads(path.read_text()).get("do_sample")
    except (OSError, ValueError, AttributeError):
        return None
