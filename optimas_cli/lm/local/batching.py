"""A small dynamic-batching queue: callers on many threads submit one item each and block; a worker
thread gathers items that share a key into one batch and runs them together.

litellm hands a custom provider one request per call, so without this the local model would generate
one sequence at a time and waste most of its throughput. A live batcher goes further (continuous batching):
its runner hands back each result as soon as it is ready and lets items that arrive meanwhile join the batch.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any


@dataclass
class _Pending:
    items: list[tuple[Any, Future, int]] = field(default_factory=list)  # (item, its future, its cost)
    last_arrival: float = 0.0
    expected: int = 1  # how many items the submitters announced for this key (batch hint)


class LiveBatch:
    """A running batch of a live batcher: `items` it started with, `join` for more, `deliver` for each result.

    Items are numbered in the order the runner got them: the starting ones 0, 1, ..., then each joined one."""

    def __init__(self, batcher: DynamicBatcher, key: Hashable, entries: list[tuple[Any, Future, int]]):
        self._batcher, self.key, self._entries = batcher, key, list(entries)
        self.items = [item for item, _, _ in entries]

    def join(self, accepts: Callable[[list[int]], bool]) -> list[Any]:
        """The oldest waiting items of this key whose costs `accepts` (the longest such run), now taken into this
        batch; none while another key is waiting, so that this batch ends and that key is served."""
        taken = self._batcher._take_joining(self.key, accepts)
        self._entries.extend(taken)
        return [item for item, _, _ in taken]

    def deliver(self, number: int, result: Any) -> None:
        self._entries[number][1].set_result(result)

    def fail(self, error: BaseException) -> None:
        """Every item without a result gets `error`."""
        for _, future, _ in self._entries:
            if not future.done():
                future.set_exception(error)


class DynamicBatcher:
    """Runs `run_batch(key, items) -> results` on batches of items submitted under the same key
    (`live=True`: `run_batch(key, LiveBatch)`, which delivers every result itself).

    A batch is closed when it reaches `max_batch_size` rows or `max_batch_tokens`, when it has the
    number of items its submitters announced (`expected`), or when no new item has arrived for
    `gather_seconds` (`hinted_gather_seconds` while announced items are still missing). Keys are
    served oldest first.

    Each item may carry a cost in tokens (a local model: prompt tokens + max new tokens). Rows are
    padded to the longest one, so a batch costs rows x its largest item, and that is what
    `max_batch_tokens` caps: the KV cache and activations of a generate call grow with it, and 32
    long prompts at once are what took `make run` to 9 GB. A single item over the cap runs alone.
    """

    def __init__(
        self,
        run_batch: Callable[[Hashable, list[Any]], list[Any]],
        max_batch_size: int = 32,
        gather_seconds: float = 0.01,
        hinted_gather_seconds: float = 0.5,
        name: str = "batcher",
        max_batch_tokens: int | None = None,
        live: bool = False,
    ):
        if max_batch_size < 1:
            raise ValueError("max_batch_size must be at least 1")
        if max_batch_tokens is not None and max_batch_tokens < 1:
            raise ValueError("max_batch_tokens must be at least 1 (or None: no cap)")
        self.run_batch = run_batch
        self.live = live
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max_batch_tokens
        self.gather_seconds = gather_seconds
        self.hinted_gather_seconds = hinted_gather_seconds
        self.batch_sizes: list[int] = []  # every batch run, for tests and benchmarks
        self.join_sizes: list[int] = []  # every group of items that joined a live batch
        self._pending: OrderedDict[Hashable, _Pending] = OrderedDict()
        self._cond = threading.Condition()
        self._worker = threading.Thread(target=self._serve, name=name, daemon=True)
        self._worker.start()

    def submit(self, key: Hashable, items: list[Any], expected: int = 1, costs: list[int] | None = None) -> list[Any]:
        """Queue items and wait for their results (an exception from run_batch is re-raised here).

        `expected` announces how many items for this key are on their way from concurrent callers,
        so the batch waits for them instead of starting early with a few. `costs`: each item's tokens.
        """
        futures = [Future() for _ in items]
        costs = list(costs) if costs is not None else [0] * len(items)
        with self._cond:
            now = time.monotonic()
            pending = self._pending.get(key)
            if pending is None:
                pending = self._pending[key] = _Pending()
            pending.items.extend(zip(items, futures, costs, strict=True))
            pending.last_arrival = now
            pending.expected = max(pending.expected, expected)
            self._cond.notify_all()
        return [future.result() for future in futures]

    def _fitting(self, pending: _Pending) -> int:
        """How many of the oldest items make one batch within the row and token caps (at least one)."""
        widest, count = 0, 0
        for _, _, cost in pending.items[: self.max_batch_size]:
            widest = max(widest, cost)
            if count and self.max_batch_tokens is not None and (count + 1) * widest > self.max_batch_tokens:
                break
            count += 1
        return count

    def _ready(self, pending: _Pending, now: float) -> float:
        """0 when the batch should run now, else how long to wait before checking again."""
        size = len(pending.items)
        if size >= min(self.max_batch_size, max(pending.expected, 1)) or self._fitting(pending) < size:
            return 0.0
        window = self.hinted_gather_seconds if pending.expected > size else self.gather_seconds
        remaining = pending.last_arrival + window - now
        return max(remaining, 0.0)

    def _take_batch(self) -> tuple[Hashable, list[tuple[Any, Future]]]:
        with self._cond:
            while True:
                while not self._pending:
                    self._cond.wait()
                now = time.monotonic()
                waits = {key: self._ready(pending, now) for key, pending in self._pending.items()}
                ready = [key for key, wait in waits.items() if wait == 0.0]
                if ready:
                    key = ready[0]  # oldest first: _pending keeps arrival order
                    pending = self._pending[key]
                    take = self._fitting(pending)
                    batch, rest = pending.items[:take], pending.items[take:]
                    if rest:
                        pending.items = rest
                        pending.expected = max(pending.expected - len(batch), 1)
                        self._pending.move_to_end(key)
                    else:
                        del self._pending[key]
                    return key, batch
                wait = min(waits.values())
                self._cond.wait(timeout=wait)

    def _take_joining(self, key: Hashable, accepts: Callable[[list[int]], bool]) -> list[tuple[Any, Future, int]]:
        with self._cond:
            pending = self._pending.get(key)
            if pending is None or any(other != key for other in self._pending):
                return []
            count = 0
            while count < len(pending.items) and accepts([cost for _, _, cost in pending.items[: count + 1]]):
                count += 1
            taken, pending.items = pending.items[:count], pending.items[count:]
            if not pending.items:
                del self._pending[key]
            else:
                pending.expected = max(pending.expected - count, 1)
            if taken:
                self.join_sizes.append(len(taken))
            return taken

    def _serve(self) -> None:
        while True:
            key, batch = self._take_batch()
            self.batch_sizes.append(len(batch))
            if self.live:
                self._run_live(key, batch)
                continue
            try:
                results = self.run_batch(key, [item for item, _, _ in batch])
                if len(results) != len(batch):
                    raise RuntimeError(f"run_batch returned {len(results)} results for {len(batch)} items")
            except BaseException as error:  # the callers re-raise it; the worker keeps serving
                for _, future, _ in batch:
                    future.set_exception(error)
                continue
            for (_, future, _), result in zip(batch, results, strict=True):
                future.set_result(result)

    def _run_live(self, key: Hashable, batch: list[tuple[Any, Future, int]]) -> None:
        live = LiveBatch(self, key, batch)
        try:
            self.run_batch(key, live)
        except BaseException as error:  # the callers re-raise it; the worker keeps serving
            live.fail(error)
        live.fail(RuntimeError("the batch runner returned without a result for this item"))
