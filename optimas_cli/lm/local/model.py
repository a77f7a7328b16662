"""One transformers causal LM in this process: batched generation, seeded sampling, LoRA adapters.

Only the provider's batching worker thread calls `generate`, so switching adapters never races.
"""
from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    LogitsProcessor,
    StoppingCriteria,
)

from optimas_cli.devices import pick_device, pick_dtype
from optimas_cli.errors import UserError
from optimas_cli.lm.adapters import adapter_fingerprint, adapter_folder
from optimas_cli.lm.local.clock import ENGINE, EngineTotals
from optimas_cli.lm.local.decode import DecodeBatch, Row
from optimas_cli.lm.local.onednn import use_onednn_linears

log = logging.getLogger(__name__)

# Base models have no chat template: turns are written as "User: ..." / "Assistant: ..." lines and
# generation stops when the model starts the next user turn.
PLAIN_USER_TURN = "\nUser:"


@dataclass(frozen=True)
class Decoding:
    """Settings shared by every row of a batch (rows differ only in prompt and seed).

    `beam_groups` > 0 asks for diverse beam search instead: one candidate per group (see diverse_beam.py).
    """

    temperature: float
    max_tokens: int
    stop: tuple[str, ...] = ()
    beam_groups: int = 0
    diversity_penalty: float = 0.0


@dataclass(frozen=True)
class Request:
    prompt: str
    decoding: Decoding
    seed: int


@dataclass
class Generation:
    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # "stop" (end of turn or stop string) or "length"


class SeededGumbelSampling(LogitsProcessor):
    """Samples each row from softmax(logits / T) with that row's own torch.Generator.

    argmax(logits / T + Gumbel noise) is an exact sample from softmax(logits / T) (Gumbel-max trick).
    Generation then runs greedy over the perturbed scores, so each row consumes only its own random
    stream: a row's sample depends on its seed, not on its position or neighbours in the batch.
    """

    def __init__(self, temperature: float, seeds: list[int]):
        self.temperature = temperature
        self.generators = [torch.Generator().manual_seed(s) for s in seeds]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        return self.perturb(scores, range(len(self.generators)))

    def perturb(self, scores: torch.FloatTensor, rows) -> torch.FloatTensor:
        """The perturbed scores of `rows` (indices into the seeds), one row of `scores` each."""
        vocab = scores.shape[-1]
        uniform = torch.stack([torch.rand(vocab, generator=self.generators[r]) for r in rows]).to(scores.device)
        gumbel = -torch.log(-torch.log(uniform.clamp_(min=1e-10)))
        return scores.float() / self.temperature + gumbel


class StopStringsInCompletion(StoppingCriteria):
    """Ends a row once its generated text contains a stop string.

    Unlike generate's own `stop_strings`, this looks only at the completion: a stop string that
    the prompt's tail and the first generated token form together (e.g. "\\n\\n") must not end it.
    """

    def __init__(self, tokenizer, stops: list[str], prompt_width: int):
        self.tokenizer, self.stops, self.prompt_width = tokenizer, stops, prompt_width
        # A stop string of L characters spans at most L tokens (+ slack for split multi-byte chars).
        self.window = max(len(s) for s in stops) + 4

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs) -> torch.BoolTensor:
        tails = input_ids[:, self.prompt_width :][:, -self.window :]
        texts = self.tokenizer.batch_decode(tails, skip_special_tokens=True)
        return torch.tensor([any(s in t for s in self.stops) for t in texts], device=input_ids.device)

    def stopped(self, new_tokens: list[int]) -> bool:
        """One row's check, on its generated tokens (the decode loop's form of __call__)."""
        text = self.tokenizer.decode(new_tokens[-self.window :], skip_special_tokens=True)
        return any(s in text for s in self.stops)


class LocalModel:
    """A causal LM loaded from a transformers folder, with a cache of LoRA adapters."""

    def __init__(self, name: str, folder: Path, dtype: str = "auto", device: str = "auto", max_adapters: int = 8):
        self.device = pick_device(device, "lm.device")
        dtype = pick_dtype(dtype, self.device, "lm.dtype")
        self.name, self.folder = name, Path(folder)
        self.tokenizer = AutoTokenizer.from_pretrained(self.folder)
        self.tokenizer.padding_side = "left"  # decoder-only batches pad on the left
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(self.folder, dtype=dtype).to(self.device).eval()
        use_onednn_linears(self.model)
        self.chat_template = bool(self.tokenizer.chat_template)
        # A fast tokenizer keeps its padding setting in shared state that every call rewrites: the provider
        # counts prompt tokens on the client's threads while the batcher encodes a padded batch, and an
        # unguarded count in between left a batch unpadded ("Unable to create tensor").
        self._tokenizer_lock = threading.Lock()
        self.eos_ids = self._eos_ids()
        self.max_positions = getattr(self.model.config, "max_position_embeddings", None) or 4096
        self.max_adapters = max_adapters
        self._peft = None  # PeftModel wrapping self.model once the first adapter is requested
        self._adapters: OrderedDict[str, str] = OrderedDict()  # fingerprint -> peft adapter name

    def _eos_ids(self) -> list[int]:
        ids = self.model.generation_config.eos_token_id
        ids = set(ids if isinstance(ids, list) else [ids] if ids is not None else [])
        if self.tokenizer.eos_token_id is not None:
            ids.add(self.tokenizer.eos_token_id)
        return sorted(ids)

    # ---- prompts -------------------------------------------------------------------------------
    def render(self, messages: list[dict]) -> str:
        return render_chat(self.tokenizer, messages)

    def prompt_tokens(self, prompt: str) -> int:
        """The tokens `prompt` takes in a batch (as `tokenize` encodes it), without padding."""
        with self._tokenizer_lock:
            return len(self.tokenizer(prompt, add_special_tokens=not self.chat_template)["input_ids"])

    def tokenize(self, prompts: list[str], max_new_tokens: int | list[int]) -> dict:
        """A left-padded batch of `prompts`; a prompt too long for its row's max new tokens keeps its end (the
        question and the generation prompt), cut row by row so that a row's prompt never depends on its neighbours."""
        # A chat template already writes its special tokens; a plain prompt needs the tokenizer's BOS.
        with self._tokenizer_lock:
            encoded = self.tokenizer(
                prompts, return_tensors="pt", padding=True, add_special_tokens=not self.chat_template
            )
        news = max_new_tokens if isinstance(max_new_tokens, list) else [max_new_tokens] * len(prompts)
        budgets = torch.tensor([self.max_positions - n for n in news])
        lengths = encoded["attention_mask"].sum(dim=1)
        if bool((lengths > budgets).any()):
            for row in (lengths > budgets).nonzero().flatten().tolist():
                log.warning("%s: prompt of %d tokens cut to its last %d", self.name, int(lengths[row]), int(budgets[row]))
            width = encoded["attention_mask"].shape[1]
            kept = torch.arange(width)[None, :] >= width - torch.minimum(lengths, budgets)[:, None]
            encoded["attention_mask"] = encoded["attention_mask"] * kept  # a cut token is masked like padding
            lead = width - int(torch.minimum(lengths, budgets).max())
            encoded = {k: v[:, lead:] for k, v in encoded.items()}
        return encoded

    # ---- adapters ------------------------------------------------------------------------------
    def _adapter_scope(self, adapter: str | None):
        """Make `adapter` (a peft folder) active for the next generate, or the base weights when None."""
        if adapter is None:
            return self._peft.disable_adapter() if self._peft is not None else nullcontext()
        fingerprint = adapter_fingerprint(adapter)
        if fingerprint not in self._adapters:
            self._load_adapter(adapter_folder(adapter), fingerprint)
        self._adapters.move_to_end(fingerprint)
        self._peft.set_adapter(self._adapters[fingerprint])
        return nullcontext()

    def _load_adapter(self, folder: Path, fingerprint: str) -> None:
        from peft import PeftModel

        name = f"adapter_{fingerprint[:16]}"
        try:
            if self._peft is None:
                self._peft = PeftModel.from_pretrained(self.model, folder, adapter_name=name, is_trainable=False)
                self._peft.eval()
            else:
                self._peft.load_adapter(folder, adapter_name=name, is_trainable=False)
        except (ValueError, KeyError, RuntimeError) as error:
            raise UserError(
                f"LoRA adapter {str(folder)!r} does not fit local model {self.name!r}: {error}",
                "train the adapter on this model's folder (optimas_cli.lm.local_model_folder)",
            ) from error
        self._adapters[fingerprint] = name
        while len(self._adapters) > self.max_adapters:
            _, evicted = self._adapters.popitem(last=False)
            self._peft.set_adapter(name)  # never delete the active adapter
            self._peft.delete_adapter(evicted)

    @property
    def _generator_model(self):
        return self._peft if self._peft is not None else self.model

    # ---- generation ----------------------------------------------------------------------------
    def stop_strings(self, decoding: Decoding) -> list[str]:
        return [s for s in decoding.stop if s] + ([] if self.chat_template else [PLAIN_USER_TURN])

    def generation_kwargs(self, decoding: Decoding, seeds: list[int], prompt_width: int) -> dict:
        """Arguments to transformers' model.generate for one batch: the reference the decode loop is checked
        against (tests/test_lm_decode.py) and the raw baseline of scripts/bench_lm.py."""
        config = GenerationConfig(
            max_new_tokens=decoding.max_tokens,
            do_sample=False,  # sampling, when asked for, is done by SeededGumbelSampling below
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=self.eos_ids,
        )
        kwargs: dict = {"generation_config": config}
        stop = self.stop_strings(decoding)
        if stop:
            kwargs["stopping_criteria"] = [StopStringsInCompletion(self.tokenizer, stop, prompt_width)]
        if decoding.temperature > 0:
            kwargs["logits_processor"] = [SeededGumbelSampling(decoding.temperature, seeds)]
        return kwargs

    def generate(
        self, prompts: list[str], decoding: Decoding, seeds: list[int], adapter: str | None = None
    ) -> list[Generation]:
        """One batch of prompts sharing `decoding`, decoded together (no joins): the results in prompt order."""
        results: dict[int, Generation] = {}
        self.serve([Request(p, decoding, s) for p, s in zip(prompts, seeds, strict=True)], adapter,
                   deliver=results.__setitem__)
        return [results[i] for i in range(len(prompts))]

    def serve(self, requests: list[Request], adapter: str | None, deliver: Callable[[int, Generation], None],
              join: Callable[[int, int], list[Request]] | None = None) -> None:
        """Decode `requests` with continuous batching (decode.py) and hand each result to `deliver(handle, result)`
        as soon as it is done; handles count the requests in arrival order, joined ones after the first.

        `join(rows in flight, reach)` is asked after each step for more requests to prefill and add (reach: the
        widest the cache may grow, DecodeBatch.reach); it is not asked for models with sliding-window layers.
        """
        batch = DecodeBatch(self._generator_model, self.eos_ids)
        handles = itertools.count()
        pending: dict[int, tuple[Request, int]] = {}  # handle -> (request, its prompt tokens)
        with self._adapter_scope(adapter):
            self._prefill(batch, requests, handles, pending)
            while batch.rows:
                started = time.perf_counter()
                finished = batch.step()  # the rows still in flight ran one token on
                ENGINE.add(EngineTotals(decode_tokens=len(batch.rows), decode_seconds=time.perf_counter() - started))
                for row in finished:
                    request, prompt_tokens = pending.pop(row.handle)
                    deliver(row.handle, self._generation(row.tokens, request.decoding, prompt_tokens))
                if join is not None and batch.joinable:
                    joining = join(len(batch.rows), batch.reach())
                    if joining:
                        self._prefill(batch, joining, handles, pending)

    def _prefill(self, batch: DecodeBatch, requests: list[Request], handles: Iterator[int], pending: dict) -> None:
        """Tokenize a group of requests (left-padded together), prefill it and add its rows to the batch."""
        encoded = self.tokenize([r.prompt for r in requests], [r.decoding.max_tokens for r in requests])
        encoded = {k: v.to(self.device) for k, v in encoded.items()}
        rows = []
        for request, prompt_tokens in zip(requests, encoded["attention_mask"].sum(dim=1).tolist(), strict=True):
            handle = next(handles)
            pending[handle] = (request, int(prompt_tokens))
            rows.append(self._row(handle, request))
        started = time.perf_counter()
        prefilled = batch.add(encoded["input_ids"], encoded["attention_mask"], rows)
        ENGINE.add(EngineTotals(prefill_tokens=prefilled, prefill_seconds=time.perf_counter() - started))

    def _row(self, handle: int, request: Request) -> Row:
        decoding, stop = request.decoding, self.stop_strings(request.decoding)
        stops = StopStringsInCompletion(self.tokenizer, stop, 0) if stop else None
        sampling = SeededGumbelSampling(decoding.temperature, [request.seed]) if decoding.temperature > 0 else None
        return Row(handle, decoding.max_tokens, pick=(lambda logits: sampling.perturb(logits[None], [0])[0]) if sampling else None,
                   stopped=stops.stopped if stops else None)

    def _generation(self, new_ids: list[int], decoding: Decoding, prompt_tokens: int) -> Generation:
        count, ended = completion_length(new_ids, self.eos_ids, self.tokenizer.pad_token_id)
        text = self.tokenizer.decode(new_ids[:count], skip_special_tokens=True)
        text, hit_stop = cut_at_stop(text, self.stop_strings(decoding))
        finish = "stop" if ended or hit_stop else "length"
        return Generation(text.strip() if not self.chat_template else text, prompt_tokens, count, finish)

    @torch.inference_mode()
    def diverse_generate(self, prompts: list[str], decoding: Decoding, adapter: str | None = None) -> list[list[Generation]]:
        """`decoding.beam_groups` candidates per prompt by diverse beam search, best first."""
        from optimas_cli.lm.local.diverse_beam import CausalLMScorer, DiverseBeamSettings, diverse_beam_search

        settings = DiverseBeamSettings(decoding.beam_groups, decoding.diversity_penalty, decoding.max_tokens)
        encoded = {k: v.to(self.device) for k, v in self.tokenize(prompts, decoding.max_tokens).items()}
        stops = self.stop_strings(decoding)

        def stopped(tokens: list[int]) -> bool:
            return bool(stops) and any(s in self.tokenizer.decode(tokens, skip_special_tokens=True) for s in stops)

        with self._adapter_scope(adapter):
            scorer = CausalLMScorer(self._generator_model, encoded["input_ids"], encoded["attention_mask"],
                                    settings.groups * settings.beams_per_group)
            found = diverse_beam_search(scorer, len(prompts), settings, self.eos_ids, stopped)
        prompt_tokens = encoded["attention_mask"].sum(dim=1).tolist()
        results = []
        for row, candidates in enumerate(found):
            row_results = []
            for new_ids in candidates:
                count, ended = completion_length(new_ids, self.eos_ids, None)
                text, hit_stop = cut_at_stop(self.tokenizer.decode(new_ids[:count], skip_special_tokens=True), stops)
                finish = "stop" if ended or hit_stop else "length"
                row_results.append(Generation(text.strip() if not self.chat_template else text,
                                              int(prompt_tokens[row]), count, finish))
            results.append(row_results)
        return results


def render_chat(tokenizer, messages: list[dict]) -> str:
    """The prompt text for a chat: the model's chat template, or the plain turn format for base models.

    Trainers that score completions of the local model's prompts (SysDPO, REINFORCE) render with this too.
    """
    if tokenizer.chat_template:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    parts = []
    for message in messages:
        role, content = message["role"], _text(message.get("content"))
        if role == "system":
            parts.append(f"{content}\n")
        elif role == "assistant":
            parts.append(f"Assistant: {content}")
        else:
            parts.append(f"User: {content}")
    return "\n".join(parts) + "\nAssistant:"


def completion_length(new_ids: list[int], eos_ids: list[int], pad_id: int | None) -> tuple[int, bool]:
    """Tokens generated for one row (the end-of-turn token counts; padding after it does not)."""
    for position, token in enumerate(new_ids):
        if token in eos_ids:
            return position + 1, True
        if token == pad_id:
            return position, True
    return len(new_ids), False


def cut_at_stop(text: str, stop: tuple[str, ...] | list[str]) -> tuple[str, bool]:
    """OpenAI semantics: the returned text ends before the first stop string."""
    cuts = [text.find(s) for s in stop if s and s in text]
    if not cuts:
        return text, False
    return text[: min(cuts)], True


def _text(content) -> str:
    if isinstance(content, list):  # OpenAI content parts
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return "" if content is None else str(content)
