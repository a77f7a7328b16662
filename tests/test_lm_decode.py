"""The embedded model's decode loop (optimas_cli/lm/local/decode.py) against transformers' generate.

It must pick the same tokens as generate for every row of a padded batch, greedy and sampled, with stop strings,
while prefilling each distinct prompt once and dropping a row from the batch when it is done; and a row that joins
a running batch must get the tokens it gets alone.
"""
from __future__ import annotations

import pytest
import torch

from optimas_cli.lm.local.decode import DecodeBatch, GrowingLayer, Row, distinct_rows, with_growing_cache
from optimas_cli.lm.local.model import Decoding, LocalModel, Request, SeededGumbelSampling, completion_length

PROMPTS = ["What is the capital of France?", "Name a colour.", "What is the capital of France?", "Why?",
           "Answer briefly: how many legs does a dog have?", "Name a colour."]


@pytest.fixture(scope="module")
def local(tiny_model_dir):
    return LocalModel("tiny-llama", tiny_model_dir)


def rendered(local: LocalModel) -> list[str]:
    return [local.render([{"role": "user", "content": p}]) for p in PROMPTS]


def reference(local: LocalModel, prompts: list[str], decoding: Decoding, seeds: list[int]) -> list[list[int]]:
    """Each row's new tokens from transformers' generate on the same padded batch."""
    encoded = local.tokenize(prompts, decoding.max_tokens)
    width = encoded["input_ids"].shape[1]
    with torch.inference_mode():
        out = local.model.generate(**encoded, **local.generation_kwargs(decoding, seeds, width))
    return [row[: completion_length(row, local.eos_ids, local.tokenizer.pad_token_id)[0]]
            for row in out[:, width:].tolist()]


def decode(model, input_ids, attention_mask, max_new_tokens, eos_ids, scores=None, stopped=None):
    """Each row's new tokens from one DecodeBatch of the whole padded batch, and the prompt tokens it prefilled.
    `scores(logits, rows)`: SeededGumbelSampling.perturb's form (None: greedy)."""
    batch = DecodeBatch(model, eos_ids)
    rows = [Row(i, max_new_tokens, pick=(lambda logits, i=i: scores(logits[None], [i])[0]) if scores else None,
                stopped=stopped) for i in range(input_ids.shape[0])]
    prefilled = batch.add(input_ids, attention_mask, rows)
    while batch.rows:
        batch.step()
    return [row.tokens for row in rows], prefilled


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_the_loop_picks_the_tokens_transformers_generate_picks(local, temperature):
    prompts = rendered(local)
    decoding = Decoding(temperature=temperature, max_tokens=10)
    seeds = [11, 12, 13, 14, 15, 16]
    expected = reference(local, prompts, decoding, seeds)
    encoded = local.tokenize(prompts, decoding.max_tokens)
    sampling = SeededGumbelSampling(temperature, seeds) if temperature > 0 else None
    got, _ = decode(local.model, encoded["input_ids"], encoded["attention_mask"], decoding.max_tokens, local.eos_ids,
                    scores=sampling.perturb if sampling else None)
    assert [row[: completion_length(row, local.eos_ids, None)[0]] for row in got] == expected


def test_stop_strings_end_a_row_where_generate_ends_it(local):
    prompts = rendered(local)
    full = local.generate(prompts, Decoding(0.0, 12), [0] * len(prompts))
    stop = full[0].text[2:4]
    assert stop, f"the tiny model's greedy text is too short to test stops: {full[0].text!r}"
    decoding = Decoding(0.0, 12, stop=(stop,))
    expected = reference(local, prompts, decoding, [0] * len(prompts))
    cut = local.generate(prompts, decoding, [0] * len(prompts))
    for row, generation in zip(expected, cut, strict=True):
        assert generation.completion_tokens == len(row)
    assert cut[0].text == full[0].text[: full[0].text.find(stop)] and cut[0].finish_reason == "stop"


def test_each_distinct_prompt_is_prefilled_once_and_a_finished_row_leaves_the_batch(local):
    prompts = rendered(local)
    encoded = local.tokenize(prompts, 6)
    firsts, owner = distinct_rows(encoded["input_ids"])
    assert firsts == [0, 1, 3, 4] and owner == [0, 1, 0, 2, 3, 1]
    full, prefilled = decode(local.model, encoded["input_ids"], encoded["attention_mask"], 6, local.eos_ids)
    assert prefilled == int(encoded["attention_mask"][firsts].sum())  # the duplicates' prompts are not computed
    assert full[2] == full[0] and full[5] == full[1]  # greedy samples of one prompt: one path

    rows, mask = encoded["input_ids"][1:4], encoded["attention_mask"][1:4]
    sampled, _ = decode(local.model, rows, mask, 6, local.eos_ids, scores=SeededGumbelSampling(1.0, [21, 22, 23]).perturb)
    assert len({tuple(row[:2]) for row in sampled}) == 3  # each row is told apart by its first two tokens
    rows_per_forward = []
    hook = local.model.model.register_forward_pre_hook(
        lambda module, args, kwargs: rows_per_forward.append(kwargs["input_ids"].shape[0]), with_kwargs=True)
    try:
        short, _ = decode(local.model, rows, mask, 6, local.eos_ids, scores=SeededGumbelSampling(1.0, [21, 22, 23]).perturb,
                          stopped=lambda tokens: tokens == sampled[1][:2])  # only the middle row stops, at 2 tokens
    finally:
        hook.remove()
    assert short == [sampled[0], sampled[1][:2], sampled[2]]  # the rows beside it are unchanged by its leaving
    # the padded prefill a row at a time, then 5 decode steps; from the third on without the row that stopped
    assert rows_per_forward == [1, 1, 1, 3, 2, 2, 2, 2]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_rows_that_join_a_running_batch_get_the_tokens_they_get_alone(local, temperature):
    prompts = rendered(local)
    decoding = Decoding(temperature=temperature, max_tokens=8)
    requests = [Request(p, decoding, 30 + i) for i, p in enumerate(prompts)]
    alone = [local.generate([r.prompt], decoding, [r.seed])[0] for r in requests]
    waiting, results, asked = requests[2:], {}, []

    def join(rows: int, reach: int) -> list[Request]:
        asked.append((rows, reach))
        return [waiting.pop(0)] if waiting and len(asked) % 2 else []  # one request every other step

    local.serve(requests[:2], None, results.__setitem__, join)
    assert not waiting and [results[i] for i in range(len(requests))] == alone
    assert max(rows for rows, _ in asked) > 2  # the joined rows ran beside the first two


def test_padding_left_by_a_long_row_is_cut_once_it_leaves_and_the_other_rows_do_not_change(local):
    long_prompt = local.render([{"role": "user", "content": " ".join(["word"] * 80)}])
    short = [local.render([{"role": "user", "content": p}]) for p in PROMPTS[:3]]
    requests = [Request(long_prompt, Decoding(0.0, 1), 0)] + [Request(p, Decoding(0.0, 8), 0) for p in short]
    alone = [local.generate([r.prompt], r.decoding, [r.seed])[0] for r in requests]
    widths, results = [], {}
    hook = local.model.model.register_forward_pre_hook(  # (tokens computed a row, the mask's width: None unpadded)
        lambda module, args, kwargs: widths.append((kwargs["input_ids"].shape[1], None if kwargs.get("attention_mask")
                                                    is None else kwargs["attention_mask"].shape[1])), with_kwargs=True)
    try:
        local.serve(requests, None, results.__setitem__)
    finally:
        hook.remove()
    assert [results[i] for i in range(len(requests))] == alone
    long_width = local.prompt_tokens(long_prompt)
    distinct = len({r.prompt for r in requests})
    prefills, steps = widths[:distinct], widths[distinct:]
    assert prefills[0] == (long_width, None) and all(mask is None for _, mask in prefills)  # a row at a time, unpadded
    assert steps[0][1] < long_width - 64  # the long row ended at its first token: its padding is cut


def test_a_prompt_too_long_for_its_own_max_tokens_is_cut_by_its_own_budget_whatever_its_neighbours(local):
    long_prompt = local.render([{"role": "user", "content": " ".join(["word"] * 150)}])
    encoded = local.tokenize([long_prompt, long_prompt, PROMPTS[0]], [1, 8, 8])
    kept = encoded["attention_mask"].sum(dim=1).tolist()
    assert kept[:2] == [local.max_positions - 1, local.max_positions - 8]
    assert encoded["input_ids"].shape[1] == local.max_positions - 1  # no column that every row masks
    assert encoded["input_ids"][1, -kept[1]:].tolist() == encoded["input_ids"][0, -kept[1]:].tolist()  # both keep the end


def test_generate_on_a_growing_cache_samples_what_it_samples_on_its_own(local):
    """GRPO's sampling (trl calls transformers' generate) runs on GrowingLayers, its repeated prompts prefilled once:
    the same tokens, fewer copies and less prefill."""
    encoded = local.tokenize(rendered(local), 70)  # past SPARE_COLUMNS new tokens: the buffers grow once
    caches, prefilled = [], []

    def generate(*args, **kwargs):
        caches.append(kwargs["cache"])
        prefilled.append(kwargs["cache"].get_seq_length())
        return local.model.generate(*args, **kwargs)

    settings = {"do_sample": True, "max_new_tokens": 70, "min_new_tokens": 70, "temperature": 1.0}
    with torch.inference_mode():
        torch.manual_seed(3)
        expected = local.model.generate(**encoded, **settings)
        torch.manual_seed(3)
        got = with_growing_cache(generate, local.model)(**encoded, **settings)
    assert torch.equal(got, expected)
    assert all(isinstance(layer, GrowingLayer) for layer in caches[0].layers)
    assert prefilled == [encoded["input_ids"].shape[1] - 1]  # PROMPTS repeat two prompts: all but the last column

    distinct = local.tokenize(sorted(set(rendered(local))), 8)
    with torch.inference_mode():
        with_growing_cache(generate, local.model)(**distinct, max_new_tokens=8, do_sample=False)
    assert prefilled[-1] == 0  # no repeated prompt: generate prefills the batch itself
