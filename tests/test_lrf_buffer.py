"""ReplayBuffer: per-component capacity, seeded sampling, Stage 2 batches mixed in the configured ratio."""
from __future__ import annotations

import pytest

from optimas_cli.lrf.buffer import ReplayBuffer
from optimas_cli.lrf.pairs import PreferencePair


def pairs(component: str, n: int, tag: str = "old") -> list[PreferencePair]:
    return [PreferencePair(component, {"i": i}, {"y": f"{tag}+{i}"}, {"y": f"{tag}-{i}"}, 1.0, 0.0, {"tag": tag})
            for i in range(n)]


def test_capacity_is_per_component_and_the_oldest_pairs_leave_first():
    buffer = ReplayBuffer(capacity_per_component=3, mix_ratio=0.5, seed=0)
    buffer.add(pairs("a", 5) + pairs("b", 2))
    assert len(buffer) == 5
    assert [p.context["i"] for p in buffer.pairs["a"]] == [2, 3, 4]
    assert {p.component for p in buffer.sample(10, components=["b"])} == {"b"}
    assert len(buffer.sample(4)) == 4 and len(set(map(id, buffer.sample(5)))) == 5  # no repeats while possible


@pytest.mark.parametrize("mix_ratio, batch_size, fresh_per_batch, replayed_per_batch",
                         [(0.25, 16, 12, 4), (0.5, 8, 4, 4), (0.75, 8, 2, 6), (0.0, 8, 8, 0)])
def test_stage2_batches_mix_fresh_and_replayed_pairs_in_the_configured_ratio(
    mix_ratio, batch_size, fresh_per_batch, replayed_per_batch
):
    buffer = ReplayBuffer(capacity_per_component=100, mix_ratio=mix_ratio, seed=1)
    buffer.add(pairs("a", 40) + pairs("b", 40))
    fresh = pairs("a", 30, tag="new")
    batches = buffer.mixed_batches(fresh, batch_size=batch_size, steps=5)
    assert len(batches) == 5
    for batch in batches:
        tags = [p.meta["tag"] for p in batch]
        assert (tags.count("new"), tags.count("old")) == (fresh_per_batch, replayed_per_batch)
    replayed = [p for b in batches for p in b if p.meta["tag"] == "old"]
    assert mix_ratio == 0.0 or {p.component for p in replayed} == {"a", "b"}  # every head stays anchored


def test_few_fresh_pairs_shrink_the_batch_but_keep_the_ratio_and_no_fresh_pair_repeats_in_a_batch():
    buffer = ReplayBuffer(capacity_per_component=100, mix_ratio=0.5, seed=0)
    buffer.add(pairs("a", 50))
    batches = buffer.mixed_batches(pairs("a", 3, tag="new"), batch_size=16, steps=4)
    for batch in batches:
        new = [p.context["i"] for p in batch if p.meta["tag"] == "new"]
        assert sorted(new) == [0, 1, 2] and len(batch) == 6


def test_an_empty_buffer_gives_all_fresh_batches_and_sampling_is_seeded():
    empty = ReplayBuffer(10, 0.5, seed=0)
    assert [len(b) for b in empty.mixed_batches(pairs("a", 20), 8, 3)] == [8, 8, 8]
    assert empty.mixed_batches([], 8, 3) == []
    one, two = ReplayBuffer(10, 0.5, seed=7), ReplayBuffer(10, 0.5, seed=7)
    for b in (one, two):
        b.add(pairs("a", 10))
    assert [p.context for p in one.sample(5)] == [p.context for p in two.sample(5)]
    with pytest.raises(ValueError):
        ReplayBuffer(10, mix_ratio=1.0)


def test_one_comparison_is_held_once_with_its_newest_label_and_never_replayed_beside_its_fresh_pair():
    # Before: Stage 2's fresh pairs re-measured Stage 1's comparisons and the buffer kept both, so it
    # could hold (y over y') and (y' over y) on one input and a batch could train on both labels.
    older = pairs("a", 4)
    reversed_first = PreferencePair("a", {"i": 0}, {"y": "old-0"}, {"y": "old+0"}, 0.7, 0.2, {"tag": "new"})
    buffer = ReplayBuffer(capacity_per_component=10, mix_ratio=0.5, seed=0)
    buffer.add(older)
    buffer.add([reversed_first, older[1]])  # comparison 0 with the other label, comparison 1 measured again
    held = list(buffer.pairs["a"])
    assert len(held) == 4 and held.count(reversed_first) == 1
    assert [p.context["i"] for p in held] == [2, 3, 0, 1]  # re-measured comparisons are the newest
    assert {p.chosen["y"] for p in held if p.context["i"] == 0} == {"old-0"}

    fresh = [PreferencePair("a", {"i": 2}, {"y": "old-2"}, {"y": "old+2"}, 1.0, 0.0, {"tag": "new"})]
    for batch in buffer.mixed_batches(fresh, batch_size=4, steps=6):
        assert [p.context["i"] for p in batch].count(2) == 1  # the held, opposite label of comparison 2 stays out


def test_a_stage2_on_some_heads_replays_only_their_pairs():
    buffer = ReplayBuffer(capacity_per_component=100, mix_ratio=0.5, seed=0)
    buffer.add(pairs("a", 40) + pairs("b", 40))
    with buffer.replaying_only(["a"]):
        batches = buffer.mixed_batches(pairs("a", 10, tag="new"), batch_size=8, steps=5)
        assert buffer.batch_shape(8, 10) == (4, 4)
    assert {p.component for b in batches for p in b} == {"a"} and all(len(b) == 8 for b in batches)
    with buffer.replaying_only(["c"]):  # nothing of c's to replay: all-fresh batches
        assert buffer.batch_shape(8, 10) == (8, 0)
    assert {p.component for b in buffer.mixed_batches(pairs("a", 10, tag="new"), 8, 5) for p in b} == {"a", "b"}
