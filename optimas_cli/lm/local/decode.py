"""The embedded model's generation loop, with continuous batching: rows join the batch while others are being
decoded and leave it as soon as they are done.

A decode step of 700-token prompts on 2 CPU cores costs ~44 ms whatever the rows (reading the weights) plus ~6 ms
a row, so a step is worth as many rows as can share it. A batch that runs until its last row ends spends its tail
on one or two long rows (half the completions of an Amazon run stop within 40 tokens, a fifth run to the 192-token
limit): measured, the steps of a budget=cpu run averaged ~5 rows. Here the requests that arrive meanwhile (the next
component of a finished row's example, other examples) are prefilled as a group and join the rows in flight.

Each distinct prompt of a group is prefilled once (the n samples of one prompt, LRF candidates, share it). A step
follows transformers' greedy loop: position ids from the attention mask, float32 logits of the last position, the
row's scores (Gumbel-perturbed when sampling: model.py), argmax; a row ends at an end-of-turn token, a stop string
or its max_new_tokens. Groups of different widths are aligned by left padding the narrower one (masked, so a
row's tokens are those it gets alone up to float rounding). `tests/test_lm_decode.py` checks a batch without joins
against generate token for token; `scripts/bench_decode.py` checks joins on real Amazon prompts.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from transformers import DynamicCache
from transformers.cache_utils import Cache, DynamicLayer

# Leading cache columns that every row left masked are cut off once there are this many: fewer are not worth a copy.
TRIM_COLUMNS = 64
# Spare columns a growing cache layer allocates at a time: one copy of the cache every this many decode steps.
SPARE_COLUMNS = 64


class GrowingLayer(DynamicLayer):
    """A layer's KV cache that writes each step's keys and values into spare columns of its buffers.

    transformers' DynamicLayer concatenates them, which copies the whole cache every step: one decode step of 24 rows
    of 700-token prompts took 183.6 ms that way and 147.7 ms this way, with bitwise the same logits
    (docs/results/speed). `keys`/`values` are the buffers; their first `length` columns are the cache.
    """

    def __init__(self) -> None:
        super().__init__()
        self.length = 0

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        new = key_states.shape[-2]
        if not self.is_initialized:
            self.device, self.is_initialized = key_states.device, True
            self.keys = self.values = key_states.new_empty((*key_states.shape[:2], 0, key_states.shape[-1]))
        if self.length + new > self.keys.shape[-2]:
            self.keys, self.values = self._grown(self.keys, new), self._grown(self.values, new)
        self.keys[:, :, self.length:self.length + new] = key_states
        self.values[:, :, self.length:self.length + new] = value_states
        self.length += new
        return self.cached()

    def _grown(self, buffer: torch.Tensor, new: int) -> torch.Tensor:
        grown = buffer.new_empty((*buffer.shape[:2], self.length + new + SPARE_COLUMNS, buffer.shape[-1]))
        grown[:, :, :self.length] = buffer[:, :, :self.length]
        return grown

    def cached(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.keys[:, :, :self.length], self.values[:, :, :self.length]

    def replace(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        self.keys, self.values, self.length = keys, values, keys.shape[-2]
        self.device, self.is_initialized = keys.device, True

    def get_seq_length(self) -> int:
        return self.length


def with_growing_cache(generate: Callable, model) -> Callable:
    """`generate` (transformers', of `model`) on a cache of GrowingLayers when the caller passes none, for models whose
    layers are all plain DynamicLayers (else `generate` itself); a batch that repeats prompts gets its cache prefilled
    with each distinct prompt once (`prefilled_once`). GRPO samples through trl's call to it, with each prompt
    repeated num_generations times. There the per-step copy of every layer's cache also cost a fresh allocation a
    layer a step, which training's allocator settings (optimas_cli/memory.py) return to the OS each time: one Amazon
    profiler step's probe took 104-109 s that way, 93-102 s on the growing cache (scripts/mem_probe.py grpo)."""
    if growing_cache(model.config) is None:
        return generate

    def generate_growing(*args, **kwargs):
        if kwargs.get("cache") is None:
            kwargs["cache"] = (prefilled_once(model, kwargs.get("input_ids"), kwargs.get("attention_mask"))
                               or growing_cache(model.config))
        return generate(*args, **kwargs)

    return generate_growing


def prefilled_once(model, input_ids: torch.Tensor | None, attention_mask: torch.Tensor | None) -> Cache | None:
    """A growing cache of every prompt's tokens but its last, each distinct (padded) prompt computed once and copied
    to its repeats; None when no prompt repeats. `generate` given it computes only the last column itself, as it
    does for any cache it is handed; the rows' keys and values are those of their own prefill up to float rounding
    (the rows of a float32 product depend on how many there are)."""
    if input_ids is None or input_ids.shape[1] < 2:
        return None
    firsts, owner = distinct_rows(input_ids)
    if len(firsts) == len(owner):
        return None
    mask = attention_mask if attention_mask is not None else torch.ones_like(input_ids)
    distinct = torch.tensor(firsts, device=input_ids.device)
    if int(mask[distinct, :-1].sum(-1).min()) == 0:
        return None  # a one-token prompt: nothing to prefill before its last token
    with torch.no_grad():
        cache, _ = prefill(model, input_ids[distinct, :-1], mask[distinct, :-1])
    cache.batch_select_indices(torch.tensor(owner, device=input_ids.device))
    return cache


def growing_cache(config) -> Cache | None:
    """A fresh cache of GrowingLayers for a model whose layers all keep plain DynamicLayers; None for another
    (a sliding-window layer keeps a cut cache)."""
    layers = DynamicCache(config=config).layers
    if not all(type(layer) is DynamicLayer for layer in layers):
        return None
    return Cache(layers=[GrowingLayer() for _ in layers])


@dataclass
class Row:
    """One request being decoded. `pick` turns its float32 logits into the scores argmax picks from (None: greedy);
    `stopped(tokens)` ends it early (stop strings)."""

    handle: int
    max_new_tokens: int
    pick: Callable[[torch.Tensor], torch.Tensor] | None = None
    stopped: Callable[[list[int]], bool] | None = None
    tokens: list[int] = field(default_factory=list)


def prefill(model, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[Cache, torch.Tensor]:
    """The KV cache and the last position's float32 logits of a left-padded group of prompts.

    A group of equal lengths is one forward pass. A padded one is computed a row at a time, each row unpadded, its
    keys and values written into the group's left-padded cache: a padded pass computes the padding and, under the
    mask, every query against every key (transformers' SDPA takes its causal kernel only without a mask). Real
    prompt tokens a second (scratch measurement, 2 cores): 48 Amazon analyzer prompts in shortest-first groups of 8
    (7.5% padding) 651 padded against 688 a row at a time; 48 single-call prompts 597 against 669; 6 rows of
    1,100-2,600 tokens (39% padding) 267 against 598. A row's products then have its own length in rows, so its
    numbers match the padded pass's up to float rounding. A model whose cache cannot be left-padded
    (sliding-window layers) keeps the padded pass.
    """
    padded = not bool(attention_mask.all())
    cache = growing_cache(model.config)
    if not padded or cache is None:
        positions = (attention_mask.long().cumsum(-1) - 1).masked_fill(attention_mask == 0, 0)
        cache = cache or DynamicCache(config=model.config)
        out = model(input_ids=input_ids, attention_mask=attention_mask if padded else None, position_ids=positions,
                    cache=cache, use_cache=True, logits_to_keep=1)
        return cache, out.logits[:, -1].to(dtype=torch.float32)
    rows, width = input_ids.shape
    logits = []
    for slot, (ids, mask) in enumerate(zip(input_ids, attention_mask, strict=True)):
        length = int(mask.sum())
        row_cache = Cache(layers=[GrowingLayer() for _ in cache.layers])
        out = model(input_ids=ids[None, width - length:], position_ids=torch.arange(length, device=ids.device)[None],
                    cache=row_cache, use_cache=True, logits_to_keep=1)
        logits.append(out.logits[:, -1].to(dtype=torch.float32))
        for layer, alone in zip(cache.layers, row_cache.layers, strict=True):
            keys, values = alone.cached()
            if not layer.is_initialized:  # zeros where the rows are padded (masked in every later step)
                shape = (rows, keys.shape[1], width, keys.shape[3])
                layer.replace(keys.new_zeros(shape), values.new_zeros(shape))
            layer.keys[slot, :, width - length:] = keys[0]
            layer.values[slot, :, width - length:] = values[0]
    return cache, torch.cat(logits)


def distinct_rows(input_ids: torch.Tensor) -> tuple[list[int], list[int]]:
    """The first row of each distinct (padded) prompt, and for every row the index of its prompt among them."""
    index_of: dict[tuple[int, ...], int] = {}
    firsts, owner = [], []
    for row, ids in enumerate(input_ids.tolist()):
        key = tuple(ids)
        if key not in index_of:
            index_of[key] = len(firsts)
            firsts.append(row)
        owner.append(index_of[key])
    return firsts, owner


def _pad_left(tensor: torch.Tensor, columns: int, dim: int) -> torch.Tensor:
    if columns == 0:
        return tensor
    pad = [0, 0] * (tensor.dim() - 1 - dim) + [columns, 0]
    return F.pad(tensor, pad)


class DecodeBatch:
    """The rows in flight on one model, their shared KV cache, and each row's logits for its next token."""

    def __init__(self, model, eos_ids):
        self.model, self.eos = model, set(eos_ids)
        # Rows join by left padding the cache; a sliding-window layer (Gemma 3) keeps a cut cache that padding would
        # misalign, so such a model decodes each batch to its end, on transformers' own cache.
        self.joinable = growing_cache(model.config) is not None
        self.rows: list[Row] = []  # in the cache's row order
        self.cache: DynamicCache | None = None
        self.mask: torch.Tensor | None = None  # [rows, width]; None while no row is padded
        self.position: torch.Tensor | None = None  # [rows, 1]: each row's last position
        self.logits: torch.Tensor | None = None  # [rows, vocab]: float32 logits of each row's next token

    @property
    def width(self) -> int:
        return self.cache.get_seq_length() if self.cache is not None else 0

    def reach(self) -> int:
        """The widest the cache can grow if no row joins: its width plus the most tokens a row may still add."""
        return self.width + max((row.max_new_tokens - len(row.tokens) for row in self.rows), default=0)

    @torch.inference_mode()
    def add(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, rows: list[Row]) -> int:
        """Prefill a left-padded group of prompts (each distinct one once) and let its rows join the batch.
        Returns the prompt tokens computed."""
        padded = not bool(attention_mask.all())
        positions = (attention_mask.long().cumsum(-1) - 1).masked_fill(attention_mask == 0, 0)
        firsts, owner = distinct_rows(input_ids)
        distinct = torch.tensor(firsts, device=input_ids.device)
        cache, logits = prefill(self.model, input_ids[distinct], attention_mask[distinct])
        expand = torch.tensor(owner, device=input_ids.device)
        logits = logits[expand]
        if len(firsts) < len(rows):
            cache.batch_select_indices(expand)  # every sample of a prompt starts from its one prefill
        if not self.rows:
            self.cache, self.mask, self.position, self.logits = cache, attention_mask if padded else None, positions[:, -1:], logits
        else:
            self._merge(cache, attention_mask, positions[:, -1:], logits)
        self.rows.extend(rows)
        return int(attention_mask[distinct].sum())

    def _merge(self, cache: DynamicCache, mask: torch.Tensor, position: torch.Tensor, logits: torch.Tensor) -> None:
        """Append a prefilled group below the rows in flight, the narrower of the two padded on the left."""
        old_width, new_width = self.width, mask.shape[1]
        width = max(old_width, new_width)
        old_mask = self.mask if self.mask is not None else mask.new_ones((len(self.rows), old_width))
        self.mask = torch.cat([_pad_left(old_mask, width - old_width, 1), _pad_left(mask, width - new_width, 1)])
        for mine, theirs in zip(self.cache.layers, cache.layers, strict=True):
            (my_keys, my_values), (their_keys, their_values) = mine.cached(), theirs.cached()
            mine.replace(torch.cat([_pad_left(my_keys, width - old_width, 2), _pad_left(their_keys, width - new_width, 2)]),
                         torch.cat([_pad_left(my_values, width - old_width, 2),
                                    _pad_left(their_values, width - new_width, 2)]))
        self.position = torch.cat([self.position, position])
        self.logits = torch.cat([self.logits, logits])

    @torch.inference_mode()
    def step(self) -> list[Row]:
        """Pick every row's next token; the rows that are done leave and are returned, the others run one token on."""
        chosen = self.logits.argmax(dim=-1)
        for slot, row in enumerate(self.rows):
            if row.pick is not None:
                chosen[slot] = row.pick(self.logits[slot]).argmax()
        keep, finished = [], []
        for slot, (row, token) in enumerate(zip(self.rows, chosen.tolist(), strict=True)):
            row.tokens.append(token)
            done = token in self.eos or len(row.tokens) >= row.max_new_tokens or (
                row.stopped is not None and row.stopped(row.tokens))
            (finished if done else keep).append(slot)
        finished_rows = [self.rows[slot] for slot in finished]
        if not keep:
            self.rows, self.cache, self.mask, self.position, self.logits = [], None, None, None, None
            return finished_rows
        if finished:  # finished rows leave the cache: later steps cost only the rows still writing
            index = torch.tensor(keep, device=chosen.device)
            self.cache.batch_select_indices(index)
            chosen, self.position = chosen[index], self.position[index]
            self.mask = self.mask[index] if self.mask is not None else None
            self.rows = [self.rows[slot] for slot in keep]
            self._trim()
        self.position = self.position + 1
        if self.mask is not None:
            self.mask = torch.cat([self.mask, self.mask.new_ones((self.mask.shape[0], 1))], dim=-1)
        out = self.model(input_ids=chosen[:, None], attention_mask=self.mask, position_ids=self.position,
                         cache=self.cache, use_cache=True, logits_to_keep=1)
        self.logits = out.logits[:, -1].to(dtype=torch.float32)
        return finished_rows

    def _trim(self) -> None:
        """Cut the leading columns no row attends to any more (the padding of rows that have left)."""
        if self.mask is None or not self.joinable:
            return
        lead = int(self.mask.any(dim=0).long().argmax())
        if lead >= TRIM_COLUMNS:
            self.mask = self.mask[:, lead:]
            for layer in self.cache.layers:  # views: the spare columns stay
                layer.keys, layer.values, layer.length = layer.keys[:, :, lead:], layer.values[:, :, lead:], layer.length - lead
