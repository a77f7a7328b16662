"""The dynamic-batching queue that turns concurrent single requests into batches."""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from optimas_cli.lm.local.batching import DynamicBatcher


def _doubling_batcher(**kwargs) -> tuple[DynamicBatcher, list]:
    seen: list[tuple] = []

    def run(key, items):
        seen.append((key, list(items)))
        time.sleep(0.01)
        return [(key, item * 2) for item in items]

    return DynamicBatcher(run, **kwargs), seen


def test_concurrent_submissions_with_a_hint_form_one_batch_and_results_go_back_to_their_callers():
    batcher, seen = _doubling_batcher(max_batch_size=32, gather_seconds=0.001, hinted_gather_seconds=5.0)

    def submit(i):
        time.sleep(0.002 * i)  # staggered arrivals, slower than the plain gather window
        return batcher.submit("k", [i], expected=12)[0]

    with ThreadPoolExecutor(12) as pool:
        results = list(pool.map(submit, range(12)))
    assert results == [("k", 2 * i) for i in range(12)]
    assert batcher.batch_sizes == [12]


def test_batches_never_exceed_the_maximum_and_keys_are_never_mixed():
    batcher, seen = _doubling_batcher(max_batch_size=4, gather_seconds=0.05)
    with ThreadPoolExecutor(10) as pool:
        futures = [pool.submit(batcher.submit, "a" if i % 2 else "b", [i], 10) for i in range(10)]
        results = [f.result()[0] for f in futures]
    assert results == [("a" if i % 2 else "b", 2 * i) for i in range(10)]
    assert max(batcher.batch_sizes) <= 4 and sum(batcher.batch_sizes) == 10
    assert all((i % 2 == 1) == (key == "a") for key, items in seen for i in items)


def test_one_submission_of_several_items_is_one_batch():
    batcher, _ = _doubling_batcher(max_batch_size=8)
    assert batcher.submit("k", [1, 2, 3], expected=3) == [("k", 2), ("k", 4), ("k", 6)]
    assert batcher.batch_sizes == [3]


def test_an_error_in_a_batch_reaches_every_caller_and_the_worker_survives():
    calls = []

    def run(key, items):
        calls.append(items)
        if len(calls) == 1:
            raise ValueError("boom")
        return items

    batcher = DynamicBatcher(run, max_batch_size=4)
    with pytest.raises(ValueError, match="boom"):
        batcher.submit("k", [1, 2], expected=2)
    assert batcher.submit("k", [3]) == [3]


def test_a_missing_hinted_item_delays_the_batch_only_until_the_hinted_window_ends():
    batcher, _ = _doubling_batcher(max_batch_size=8, hinted_gather_seconds=0.2)
    start = time.monotonic()
    assert batcher.submit("k", [1], expected=5) == [("k", 2)]
    assert 0.15 < time.monotonic() - start < 5.0


def test_a_token_cap_splits_a_batch_by_its_padded_size_and_an_oversized_item_runs_alone():
    batcher, seen = _doubling_batcher(max_batch_size=32, gather_seconds=0.05, max_batch_tokens=100)
    costs = [30, 30, 30, 30, 10, 200, 10]  # padded cost of a batch: rows x its largest item
    with ThreadPoolExecutor(len(costs)) as pool:
        futures = []
        for i, cost in enumerate(costs):
            futures.append(pool.submit(batcher.submit, "k", [i], len(costs), [cost]))
            time.sleep(0.005)  # arrive in order
        results = [f.result()[0] for f in futures]
    assert results == [("k", 2 * i) for i in range(len(costs))]
    assert [items for _, items in seen] == [[0, 1, 2], [3, 4], [5], [6]]
    assert batcher.batch_sizes == [3, 2, 1, 1]


def test_without_costs_only_rows_are_capped():
    batcher, _ = _doubling_batcher(max_batch_size=4, max_batch_tokens=1)
    assert batcher.submit("k", list(range(6)), expected=6) == [("k", 2 * i) for i in range(6)]
    assert batcher.batch_sizes == [4, 2]


def test_a_token_cap_below_one_is_refused():
    with pytest.raises(ValueError, match="max_batch_tokens"):
        DynamicBatcher(lambda key, items: items, max_batch_tokens=0)


def test_a_live_batch_delivers_each_result_when_ready_and_takes_in_items_that_arrive_meanwhile():
    joined, second_started = [], threading.Event()

    def run(key, live):
        for number, item in enumerate(live.items):
            live.deliver(number, item * 2)  # the first caller is answered before the batch ends
        assert second_started.wait(5)
        deadline = time.monotonic() + 5
        while not joined and time.monotonic() < deadline:
            joined.extend(live.join(lambda costs: sum(costs) <= 10))
        for number, item in enumerate(joined, start=len(live.items)):
            live.deliver(number, item * 2)

    batcher = DynamicBatcher(run, live=True)
    assert batcher.submit("k", [1]) == [2]
    with ThreadPoolExecutor(1) as pool:
        second_started.set()
        late = pool.submit(batcher.submit, "k", [5, 6], 2, [4, 4])
        assert late.result(timeout=10) == [10, 12]
    assert batcher.batch_sizes == [1] and batcher.join_sizes == [2]


def test_a_live_batch_takes_no_item_while_another_key_waits_and_an_undelivered_item_fails():
    others_waiting, taken, served = threading.Event(), [], []

    def run(key, live):
        served.append((key, list(live.items)))
        if live.items == [1]:
            assert others_waiting.wait(5)
            time.sleep(0.05)
            taken.extend(live.join(lambda costs: True))  # an "a" waits, but so does "b", which came first
            return  # without delivering: its caller gets an error, not a hang
        for number, item in enumerate(live.items):
            live.deliver(number, item)

    batcher = DynamicBatcher(run, live=True, gather_seconds=0.0)
    with ThreadPoolExecutor(3) as pool:
        first = pool.submit(batcher.submit, "a", [1])
        time.sleep(0.05)
        other = pool.submit(batcher.submit, "b", [2])
        time.sleep(0.01)
        same_key = pool.submit(batcher.submit, "a", [3])
        others_waiting.set()
        with pytest.raises(RuntimeError, match="without a result"):
            first.result(timeout=10)
        assert other.result(timeout=10) == [2] and same_key.result(timeout=10) == [3]
    assert taken == [] and served == [("a", [1]), ("b", [2]), ("a", [3])]
