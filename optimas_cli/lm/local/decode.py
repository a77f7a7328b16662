"""The embedded model's generation loop: each distinct prompt is prefilled once, and a row leaves the batch
as soon as it is done.

transformers' `generate` prefills every row, also the n samples of one prompt that the client sends as n
rows (LRF candidates: about 300 of the 1,000 generated calls of an Amazon run at budget=cpu), and keeps
decoding a finished row until the batch's last row ends. This loop does neither, and otherwise follows
generate's greedy loop step for step: position ids from the attention mask, no mask when no row is padded,
float32 logits of the last position, the row's scores (Gumbel-perturbed when sampling: model.py), argmax,
and a row ends at an end-of-turn token, a stop string or max_new_tokens. `tests/test_lm_decode.py` checks it
against generate token for token, `scripts/bench_decode.py` on real Amazon prompts. Measured
(docs/results/speed): LRF collection 1.20-1.30x faster on the bench slices, the same results. Dropping rows saves
less than it seems: a decode step of 700-token prompts on 2 CPU cores takes 94 ms for 4 rows and 123 ms for 12,
most of it reading the weights.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from transformers import DynamicCache

Scores = Callable[[torch.Tensor, Sequence[int]], torch.Tensor]  # (logits of rows, their batch rows) -> scores


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


@torch.inference_mode()
def decode(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    max_new_tokens: int,
    eos_ids: Sequence[int],
    scores: Scores | None = None,
    stopped: Callable[[list[int]], bool] | None = None,
    first_step: Callable[[], None] | None = None,
) -> tuple[list[list[int]], int]:
    """New tokens of each row of a left-padded batch (an end-of-turn token included), and the prompt tokens
    really prefilled (each distinct prompt once, no padding).

    `scores` turns a step's logits into the scores argmax picks from (None: greedy on the logits);
    `stopped(tokens)` ends a row early (stop strings); `first_step()` is called once the first tokens are chosen.
    """
    rows = input_ids.shape[0]
    padded = not bool(attention_mask.all())
    positions = (attention_mask.long().cumsum(-1) - 1).masked_fill(attention_mask == 0, 0)
    firsts, owner = distinct_rows(input_ids)
    distinct = torch.tensor(firsts, device=input_ids.device)
    cache = DynamicCache(config=model.config)
    out = model(input_ids=input_ids[distinct], attention_mask=attention_mask[distinct] if padded else None,
                position_ids=positions[distinct], cache=cache, use_cache=True, logits_to_keep=1)
    prefilled = int(attention_mask[distinct].sum())
    expand = torch.tensor(owner, device=input_ids.device)
    logits = out.logits[:, -1].to(dtype=torch.float32)[expand]
    del out
    if len(firsts) < rows:
        cache.batch_select_indices(expand)  # every sample of a prompt starts from its one prefill
    mask = attention_mask if padded else None
    position = positions[:, -1:]
    eos = set(eos_ids)
    new_tokens: list[list[int]] = [[] for _ in range(rows)]
    active = list(range(rows))  # batch rows still writing, in the order of the cache's rows
    while True:
        step = scores(logits, active) if scores is not None else logits
        chosen = step.argmax(dim=-1)
        if first_step is not None and not new_tokens[active[0]]:
            first_step()
        keep = []
        for slot, (row, token) in enumerate(zip(active, chosen.tolist(), strict=True)):
            new_tokens[row].append(token)
            done = token in eos or len(new_tokens[row]) >= max_new_tokens or (stopped is not None and stopped(new_tokens[row]))
            if not done:
                keep.append(slot)
        if not keep:
            return new_tokens, prefilled
        if len(keep) < len(active):  # finished rows leave the cache: later steps cost only the rows still writing
            index = torch.tensor(keep, device=input_ids.device)
            cache.batch_select_indices(index)
            chosen, position = chosen[index], position[index]
            mask = mask[index] if mask is not None else None
            active = [active[slot] for slot in keep]
        position = position + 1
        if mask is not None:
            mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=-1)
        out = model(input_ids=chosen[:, None], attention_mask=mask, position_ids=position, cache=cache,
                    use_cache=True, logits_to_keep=1)
        logits = out.logits[:, -1].to(dtype=torch.float32)
        del out
