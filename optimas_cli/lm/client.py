"""LMClient: every LLM call of the project, through litellm, with a call cache and a usage ledger.

A component hands over a batch of LMRequests; the client fills in the run's defaults, serves what it
can from the cache, and sends the rest through `litellm.completion` on a thread pool (concurrent API
requests, or rows for the local provider's dynamic batcher). Each of n samples is its own call and
cache row, so samples at temperature > 0 stay distinct and reproducible. A diverse beam search request
(`diversity_penalty` set, local models only) produces its n candidates in one call, each cached in its own row.
"""
from __future__ import annotations

import logging
import os
import random
import time
from collections import Counter, defaultdict
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import litellm

from optimas_cli.errors import UserError
from optimas_cli.lm.adapters import adapter_fingerprint
from optimas_cli.lm.cache import CachedCompletion, CallCache, call_key
from optimas_cli.lm.local.provider import register_provider
from optimas_cli.lm.local.registry import is_local
from optimas_cli.lm.paths import cache_root
from optimas_cli.lm.sampling import sample_seed
from optimas_cli.lm.types import LMRequest, LMResponse
from optimas_cli.lm.usage import ComponentUsage, UsageLedger

log = logging.getLogger(__name__)
litellm.suppress_debug_info = True  # no "Give Feedback" banners in the CLI's output

# Worth another try after a pause; anything else (bad request, bad key, a local model's own error) is not.
TRANSIENT_ERRORS = (
    litellm.RateLimitError,
    litellm.Timeout,
    litellm.APIConnectionError,
    litellm.ServiceUnavailableError,
    litellm.InternalServerError,
)


@dataclass(frozen=True)
class _Call:
    """One sample to produce: request `index`, sample `offset` of its n."""

    index: int
    offset: int
    model: str
    messages: list
    temperature: float
    max_tokens: int
    stop: tuple[str, ...]
    seed: int | None
    sample_index: int
    adapter: str | None
    key: str
    n: int = 1  # samples of the request
    diversity_penalty: float | None = None  # set: the n samples are one diverse beam search's groups

    @property
    def batch_group(self) -> tuple:
        return (self.model, self.temperature, self.max_tokens, self.stop, self.adapter, self.diversity_penalty)


class LMClient:
    def __init__(
        self,
        model: str = "local/smollm2-135m-instruct",
        temperature: float = 0.0,
        max_tokens: int = 256,
        concurrency: int = 32,
        max_retries: int = 5,
        api_base: str | None = None,
        api_key_env: str | None = None,
        cache: bool | CallCache | None = True,
        cache_dir: str | None = None,
        timeout: float = 120.0,
        retry_base_seconds: float = 1.0,
        retry_max_seconds: float = 60.0,
        mock_response: str | None = None,
        litellm_kwargs: Mapping[str, Any] | None = None,
        local: Mapping[str, Any] | None = None,
    ):
        if concurrency < 1:
            raise UserError(f"lm.concurrency must be at least 1, got {concurrency}")
        self.model, self.temperature, self.max_tokens = model, float(temperature), int(max_tokens)
        self.concurrency, self.max_retries = int(concurrency), int(max_retries)
        self.api_base, self.api_key_env, self.timeout = api_base, api_key_env, timeout
        self.retry_base_seconds, self.retry_max_seconds = retry_base_seconds, retry_max_seconds
        self.mock_response = mock_response  # litellm's offline stand-in answer (tests, dry runs)
        self.litellm_kwargs = dict(litellm_kwargs or {})
        self.cache_dir = cache_root(cache_dir)
        if cache is True:
            cache = CallCache(self.cache_dir / "lm_calls.sqlite")
        # (not `cache or None`: an empty CallCache has len 0 and would read as False)
        self.cache: CallCache | None = cache if isinstance(cache, CallCache) else None
        self.usage = UsageLedger()
        self.provider = register_provider()
        self.provider.configure(**dict(local or {}))
        self._keys_checked: set[str] = set()

    # ---- public --------------------------------------------------------------------------------
    def complete(self, requests: list[LMRequest], component: str = "-") -> list[LMResponse]:
        start = time.perf_counter()
        calls = [call for i, request in enumerate(requests) for call in self._expand(i, request)]
        usage = ComponentUsage(calls=len(calls))
        results: dict[str, CachedCompletion] = {}
        to_generate: dict[str, _Call] = {}
        for call in calls:
            if call.key in results or call.key in to_generate:
                usage.cache_hits += 1  # a duplicate greedy sample: generated once, served twice
                continue
            cached = self.cache.get(call.key) if self.cache is not None else None
            if cached is not None:
                results[call.key] = cached
                usage.cache_hits += 1
            else:
                to_generate[call.key] = call
        for call, completion in self._generate(list(to_generate.values())):
            results[call.key] = completion
            usage.prompt_tokens += completion.prompt_tokens
            usage.completion_tokens += completion.completion_tokens
            usage.cost += completion.cost
            if self.cache is not None:
                self.cache.put(call.key, completion)
        usage.seconds = time.perf_counter() - start
        self.usage.record(component, usage)
        return [self._response(i, calls, results, to_generate) for i in range(len(requests))]

    # ---- request preparation -------------------------------------------------------------------
    def _expand(self, index: int, request: LMRequest) -> list[_Call]:
        model = request.model or self.model
        temperature = self.temperature if request.temperature is None else float(request.temperature)
        max_tokens = self.max_tokens if request.max_tokens is None else int(request.max_tokens)
        stop = tuple(request.stop or ())
        if request.n < 1:
            raise UserError(f"a completion request asked for n={request.n} samples", "ask for at least 1")
        if request.adapter and not is_local(model):
            raise UserError(
                f"a LoRA adapter was requested for {model!r}, but adapters apply only to local models",
                "use a local/<name> model for weights-kind components",
            )
        diverse = request.diversity_penalty
        if diverse is not None and not is_local(model):
            raise UserError(
                f"diverse beam search was requested for {model!r}, but it runs only on local models",
                "sample candidates at a temperature instead (method.sampling=temperature)",
            )
        self._check_api_key(model)
        fingerprint = adapter_fingerprint(request.adapter) if request.adapter else None
        api_base = None if is_local(model) else self.api_base
        beam = None if diverse is None else (request.n, float(diverse))
        return [
            _Call(
                index, offset, model, request.messages, temperature, max_tokens, stop, request.seed,
                request.sample_index, request.adapter,
                call_key(model, request.messages, temperature, max_tokens, list(stop), request.seed,
                         request.sample_index, offset, fingerprint, api_base, beam),
                request.n, None if diverse is None else float(diverse),
            )
            for offset in range(request.n)
        ]

    def _check_api_key(self, model: str) -> None:
        """Fail before any call when the key an API model needs is not in the environment."""
        if model in self._keys_checked or is_local(model) or self.mock_response is not None:
            return
        if self.api_key_env:
            missing = [] if os.environ.get(self.api_key_env) else [self.api_key_env]
        elif self.api_base:
            missing = []  # a self-hosted server (vLLM, SGLang, Ollama) usually needs no key
        else:
            missing = litellm.validate_environment(model=model).get("missing_keys", [])
        if missing:
            raise UserError(
                f"no API key for {model!r}: environment variable {' / '.join(missing)} is not set",
                f"export {missing[0]}=<your key>, or run with lm=local for the embedded model",
            )
        self._keys_checked.add(model)

    # ---- generation ----------------------------------------------------------------------------
    def _generate(self, calls: list[_Call]) -> list[tuple[_Call, CachedCompletion]]:
        if not calls:
            return []
        # Calls with the same settings go out together, and each tells the local provider how many
        # siblings are coming, so its batcher waits for all of them instead of starting with a few.
        calls = sorted(calls, key=lambda c: (repr(c.batch_group), c.index, c.offset))
        jobs: list[list[_Call]] = [[c] for c in calls if c.diversity_penalty is None]
        joint: dict[int, list[_Call]] = defaultdict(list)  # a diverse beam search's candidates: one call
        for c in calls:
            if c.diversity_penalty is not None:
                joint[c.index].append(c)
        jobs += list(joint.values())
        group_sizes = Counter(job[0].batch_group for job in jobs)
        workers = min(self.concurrency, len(jobs))
        if workers == 1:
            done = [(job, self._call_with_retries(job, 1)) for job in jobs]
        else:
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="lm") as pool:
                futures = [
                    (job, pool.submit(self._call_with_retries, job, min(group_sizes[job[0].batch_group], workers)))
                    for job in jobs
                ]
                done = [(job, f.result()) for job, f in futures]
        return [pair for job, completions in done for pair in zip(job, completions, strict=True)]

    def _litellm_arguments(self, call: _Call, batch_hint: int) -> dict:
        kwargs: dict[str, Any] = {
            **self.litellm_kwargs,
            "model": call.model,
            "messages": call.messages,
            "temperature": call.temperature,
            "max_tokens": call.max_tokens,
            "timeout": self.timeout,
            "num_retries": 0,  # retries are ours, with backoff, so litellm must not add its own
        }
        if call.stop:
            kwargs["stop"] = list(call.stop)
        if is_local(call.model):
            kwargs["seed"] = call.seed
            if call.diversity_penalty is not None:
                kwargs["n"] = call.n
            kwargs["extra_body"] = {
                "sample_index": call.sample_index,
                "sample_offset": call.offset,
                "batch_hint": batch_hint,
                "adapter": call.adapter,
                "cache_dir": str(self.cache_dir),  # where the provider finds (or converts) the model
                "diversity_penalty": call.diversity_penalty,
            }
        else:
            if call.temperature > 0 and call.seed is not None:
                # APIs take one integer seed (best effort): derive a distinct one for each sample.
                kwargs["seed"] = sample_seed(call.seed, call.sample_index, call.offset) % (2**31)
            if self.api_base:
                kwargs["api_base"] = self.api_base
            if self.api_key_env and os.environ.get(self.api_key_env):
                kwargs["api_key"] = os.environ[self.api_key_env]
        if self.mock_response is not None:
            kwargs["mock_response"] = self.mock_response
        return kwargs

    def _call_with_retries(self, job: list[_Call], batch_hint: int) -> list[CachedCompletion]:
        """One litellm call for the job: a single sample, or the candidates of one diverse beam search."""
        call = job[0]
        kwargs = self._litellm_arguments(call, batch_hint)
        local = is_local(call.model)
        for attempt in range(self.max_retries + 1):
            try:
                response = litellm.completion(**kwargs)
                return [self._completion(c, response) for c in job]
            except litellm.AuthenticationError as error:
                variable = self.api_key_env or "the provider's API key variable"
                raise UserError(f"{call.model!r} rejected the API key ({error.message[:200]})",
                                f"check {variable}") from error
            except TRANSIENT_ERRORS as error:
                original = _original_error(error)
                if isinstance(original, UserError):
                    raise original from None  # e.g. a bad adapter folder, wrapped by litellm
                if local:  # the embedded model fails the same way every time: no point retrying
                    raise RuntimeError(f"local model {call.model} failed: {original!r}") from original
                if attempt == self.max_retries:
                    raise
                pause = min(self.retry_max_seconds, self.retry_base_seconds * 2**attempt)
                pause *= 0.5 + random.random()  # jitter, so parallel callers do not retry in lockstep
                log.warning("%s: %s; retry %d/%d in %.1fs", call.model, type(error).__name__,
                            attempt + 1, self.max_retries, pause)
                time.sleep(pause)
        raise AssertionError("unreachable")

    def _completion(self, call: _Call, response) -> CachedCompletion:
        joint = call.diversity_penalty is not None
        choice = response.choices[call.offset if joint else 0]
        usage = getattr(response, "usage", None)
        cost = 0.0
        if not is_local(call.model):
            try:
                cost = float(litellm.completion_cost(completion_response=response) or 0.0)
            except Exception:  # a model missing from litellm's local cost map: cost unknown, not fatal
                log.debug("no cost information for %s", call.model)
        # A joint call's usage covers all its candidates: the first one carries it, so totals stay exact.
        counted = not joint or call.offset == 0
        return CachedCompletion(
            text=choice.message.content or "",
            prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0) if counted else 0,
            completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0) if counted else 0,
            cost=cost,
            finish_reason=str(choice.finish_reason or "stop"),
        )

    @staticmethod
    def _response(index: int, calls: list[_Call], results: dict, generated: dict) -> LMResponse:
        mine = [c for c in calls if c.index == index]
        entries = [results[c.key] for c in mine]
        return LMResponse(
            texts=[e.text for e in entries],
            prompt_tokens=sum(e.prompt_tokens for e in entries),
            completion_tokens=sum(e.completion_tokens for e in entries),
            cached=all(c.key not in generated for c in mine),
            cost=sum(e.cost for e in entries),
            extra={"finish_reasons": [e.finish_reason for e in entries]},
        )


def _original_error(error: BaseException) -> BaseException:
    """The exception a provider raised, under litellm's wrapping of it."""
    seen = error
    while seen.__context__ is not None and isinstance(seen, TRANSIENT_ERRORS):
        seen = seen.__context__
    return seen


def build_lm(cfg: Mapping | None = None, **overrides: Any) -> LMClient:
    """An LMClient from a conf/lm/*.yaml node (OmegaConf DictConfig or dict); keywords override it."""
    if cfg is not None and not isinstance(cfg, dict):  # an OmegaConf node: resolve interpolations
        from omegaconf import OmegaConf

        cfg = OmegaConf.to_container(cfg, resolve=True)
    settings = {k: v for k, v in dict(cfg or {}).items() if not k.startswith("_")}
    settings.update(overrides)
    known = set(LMClient.__init__.__code__.co_varnames[1 : LMClient.__init__.__code__.co_argcount])
    unknown = sorted(set(settings) - known)
    if unknown:
        raise UserError(f"unknown lm setting(s) {unknown}", f"use only {sorted(known)}")
    return LMClient(**settings)
