"""The embedded litellm provider: `litellm.completion(model="local/<name>", ...)` generates in-process.

litellm calls the provider once per request, from whatever thread made the call. Each call renders its
chat into a prompt and submits it to the model's live DynamicBatcher. Its worker thread decodes the requests
that share an adapter together, with continuous batching (decode.py): each row keeps its own temperature, stop
strings and max tokens, a row's result goes back as soon as it is done, and requests arriving meanwhile join.

Extra request fields (besides temperature, max_tokens, stop, seed, n) travel in `extra_body`:
  adapter       a peft LoRA folder to apply for this request
  sample_index  with seed and the messages, picks the random stream at temperature > 0 (lm/sampling.py)
  sample_offset index of the first of the n samples (the client sends samples one by one)
  batch_hint    how many requests the caller is sending at once with these settings
  cache_dir     where shipped models are converted (default: $OPTIMAS_CACHE_DIR or ~/.cache/optimas)
  diversity_penalty  when set, the n completions come from one diverse beam search with n groups
                (Hamming penalty of this strength between groups) instead of n samples
  noise_key     when set, keys the random stream instead of the messages (shared noise: lm/sampling.py)
"""
from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import litellm
from litellm import CustomLLM
from litellm.types.utils import Choices, Message, ModelResponse, Usage

from optimas_cli.devices import dtype_name
from optimas_cli.errors import UserError
from optimas_cli.lm.adapters import adapter_fingerprint
from optimas_cli.lm.local.batching import DynamicBatcher
from optimas_cli.lm.local.registry import PROVIDER, local_model_folder, model_name
from optimas_cli.lm.sampling import sample_seed

log = logging.getLogger(__name__)

_EXTRA_FIELDS = ("adapter", "sample_index", "sample_offset", "batch_hint", "cache_dir", "diversity_penalty",
                 "noise_key")
# OpenAI's default when a caller leaves temperature out; our client always sends one.
_DEFAULT_TEMPERATURE = 1.0
_DEFAULT_MAX_TOKENS = 256


class LocalProvider(CustomLLM):
    """Loads each local model once and serves it through a dynamic-batching queue."""

    def __init__(self) -> None:
        super().__init__()
        self.dtype = "auto"  # bfloat16 on a GPU, float32 on a CPU (see optimas_cli/devices.py)
        self.device = "auto"
        self.max_batch_size = 32
        self.max_batch_tokens: int | None = 16384  # rows x (longest prompt + max new tokens) per prefill
        self.max_live_tokens = 12288  # rows x the widest the KV cache may grow, for the rows decoding together
        self.gather_seconds = 0.01
        self.cache_dir: str | None = None  # default home of converted models; requests may name their own
        self._models: dict[Path, Any] = {}  # model folder -> LocalModel
        self._batchers: dict[Path, DynamicBatcher] = {}
        self._lock = threading.Lock()
        self.load_seconds: dict[str, float] = {}

    def configure(self, dtype: str | None = None, device: str | None = None, max_batch_size: int | None = None,
                  gather_seconds: float | None = None, cache_dir: str | None = None,
                  max_batch_tokens: int | None = None, max_live_tokens: int | None = None) -> None:
        """Settings for models loaded from now on; a dtype or device change reloads models on next use."""
        with self._lock:
            if (dtype is not None and dtype != self.dtype) or (device is not None and device != self.device):
                self.dtype = dtype or self.dtype
                self.device = device or self.device
                self._models.clear()
                self._batchers.clear()
            if max_batch_size is not None:
                self.max_batch_size = int(max_batch_size)
                for batcher in self._batchers.values():
                    batcher.max_batch_size = self.max_batch_size
            if max_batch_tokens is not None:
                if int(max_batch_tokens) < 1:
                    raise UserError(f"lm.local.max_batch_tokens must be at least 1, got {max_batch_tokens}")
                self.max_batch_tokens = int(max_batch_tokens)
                for batcher in self._batchers.values():
                    batcher.max_batch_tokens = self.max_batch_tokens
            if max_live_tokens is not None:
                if int(max_live_tokens) < 1:
                    raise UserError(f"lm.local.max_live_tokens must be at least 1, got {max_live_tokens}")
                self.max_live_tokens = int(max_live_tokens)
            if gather_seconds is not None:
                self.gather_seconds = float(gather_seconds)
            if cache_dir is not None:
                self.cache_dir = cache_dir

    def precision(self) -> str:
        """The dtype local models generate in, by name: part of a local call's cache key (other bits, other replies)."""
        return dtype_name(self.dtype, self.device, "lm.local")

    def model(self, name: str, cache_dir: str | None = None):
        """The loaded LocalModel for a name (loading, and converting a shipped GGUF, on first use).

        Models are kept per folder: clients with different cache directories get their own copy.
        """
        folder = local_model_folder(name, cache_dir or self.cache_dir)
        with self._lock:
            if folder not in self._models:
                from optimas_cli.lm.local.model import LocalModel

                start = time.perf_counter()
                self._models[folder] = LocalModel(name, folder, dtype=self.dtype, device=self.device)
                self.load_seconds[name] = time.perf_counter() - start
                self._batchers[folder] = DynamicBatcher(
                    self._batch_runner(self._models[folder]), self.max_batch_size,
                    gather_seconds=self.gather_seconds, name=f"local-{name}", max_batch_tokens=self.max_batch_tokens,
                    live=True,
                )
            return self._models[folder]

    def batcher(self, name: str, cache_dir: str | None = None) -> DynamicBatcher:
        return self._batchers[self.model(name, cache_dir).folder]

    def _batch_runner(self, local_model):
        from optimas_cli.lm.local.model import Request

        def run(key, live):
            _fingerprint, beam = key
            adapter = live.items[0][3]  # same fingerprint -> same adapter content; any row's path will do
            if beam is not None:  # one item per prompt; its result is the list of its candidates
                found = local_model.diverse_generate([prompt for prompt, _, _, _ in live.items], beam, adapter)
                for number, candidates in enumerate(found):
                    live.deliver(number, candidates)
                return

            def join(rows: int, reach: int) -> list[Request]:
                return [Request(p, d, s) for p, d, s, _ in live.join(lambda costs: self._room(rows, reach, costs))]

            local_model.serve([Request(p, d, s) for p, d, s, _ in live.items], adapter, live.deliver, join)

        return run

    def _room(self, rows: int, reach: int, costs: list[int]) -> bool:
        """Whether requests of these costs (prompt + max new tokens) may join `rows` rows decoding in a cache that
        may grow to `reach` columns: within the rows per batch, one prefill within max_batch_tokens, and the
        joined cache within max_live_tokens."""
        joined = rows + len(costs)
        prefill = len(costs) * max(costs)
        return (joined <= self.max_batch_size and (self.max_batch_tokens is None or prefill <= self.max_batch_tokens)
                and joined * max(reach, max(costs)) <= self.max_live_tokens)

    # ---- litellm entry point -------------------------------------------------------------------
    def completion(self, model: str, messages: list, model_response: ModelResponse,
                   optional_params: dict, *args: Any, **kwargs: Any) -> ModelResponse:
        from optimas_cli.lm.local.model import Decoding

        name = model_name(model)
        params = dict(optional_params)
        extra = dict(params.pop("extra_body", None) or {})
        for field in _EXTRA_FIELDS:  # also accepted as plain keyword arguments to litellm.completion
            if field in params:
                extra.setdefault(field, params.pop(field))
        temperature = params.get("temperature")
        temperature = _DEFAULT_TEMPERATURE if temperature is None else float(temperature)
        max_tokens = int(params.get("max_tokens") or params.get("max_completion_tokens") or _DEFAULT_MAX_TOKENS)
        stop = params.get("stop") or ()
        stop = (stop,) if isinstance(stop, str) else tuple(stop)
        n = int(params.get("n") or 1)
        seed = params.get("seed")
        sample_index = int(extra.get("sample_index") or 0)
        offset = int(extra.get("sample_offset") or 0)
        adapter = extra.get("adapter")
        noise_key = extra.get("noise_key")

        local_model = self.model(name, extra.get("cache_dir"))
        prompt = local_model.render(messages)
        diverse = extra.get("diversity_penalty") is not None
        decoding = Decoding(temperature=max(temperature, 0.0), max_tokens=max_tokens, stop=stop,
                            beam_groups=n if diverse else 0, diversity_penalty=float(extra.get("diversity_penalty") or 0.0))
        # Rows of one adapter decode together whatever their settings; a diverse beam search runs on its own.
        key = (adapter_fingerprint(adapter) if adapter else None, decoding if diverse else None)
        hint = int(extra.get("batch_hint") or 1)
        cost = local_model.prompt_tokens(prompt) + max_tokens  # what this row adds to a batch's padded shape
        try:
            if diverse:
                [generations] = self._batchers[local_model.folder].submit(key, [(prompt, decoding, 0, adapter)],
                                                                          expected=hint, costs=[cost * n])
            else:
                items = [(prompt, decoding, sample_seed(seed, messages, sample_index, offset + k, noise_key), adapter)
                         for k in range(n)]
                generations = self._batchers[local_model.folder].submit(key, items, expected=hint * n,
                                                                        costs=[cost] * n)
        except UserError:
            raise
        except Exception as error:
            log.exception("local model %s failed", name)
            raise litellm.exceptions.InternalServerError(
                message=f"local model {name} failed: {error}", llm_provider=PROVIDER, model=model
            ) from error

        model_response.choices = [
            Choices(index=i, finish_reason=g.finish_reason, message=Message(role="assistant", content=g.text))
            for i, g in enumerate(generations)
        ]
        model_response.model = f"{PROVIDER}/{name}"
        prompt_tokens = generations[0].prompt_tokens
        completion_tokens = sum(g.completion_tokens for g in generations)
        model_response.usage = Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                                     total_tokens=prompt_tokens + completion_tokens)
        return model_response


LOCAL_PROVIDER = LocalProvider()


def register_provider() -> LocalProvider:
    """Put the local provider in litellm.custom_provider_map (idempotent) and return it."""
    if not any(item.get("provider") == PROVIDER for item in litellm.custom_provider_map):
        litellm.custom_provider_map.append({"provider": PROVIDER, "custom_handler": LOCAL_PROVIDER})
    return LOCAL_PROVIDER
