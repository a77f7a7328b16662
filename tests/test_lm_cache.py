"""The sqlite call cache: keys, persistence, damaged files and rows, locks, concurrent writers."""
from __future__ import annotations

import multiprocessing
import sqlite3
import threading

import pytest

from optimas_cli.errors import UserError
from optimas_cli.lm.cache import CachedCompletion, CallCache, call_key

MESSAGES = [{"role": "user", "content": "What is 2+2?"}]


def test_greedy_keys_ignore_seed_and_sample_but_sampled_keys_do_not():
    greedy = {call_key("m", MESSAGES, 0.0, 16, seed=s, sample_index=i, sample_offset=k)
              for s in (0, 1) for i in (0, 1) for k in (0, 2)}
    assert len(greedy) == 1
    sampled = {call_key("m", MESSAGES, 0.8, 16, seed=0, sample_index=0, sample_offset=k) for k in range(3)}
    assert len(sampled) == 3
    base = call_key("m", MESSAGES, 0.0, 16)
    assert call_key("m", MESSAGES, 0.0, 17) != base
    assert call_key("other", MESSAGES, 0.0, 16) != base
    assert call_key("m", MESSAGES, 0.0, 16, adapter="abc") != base
    assert call_key("m", MESSAGES, 0.0, 16, stop=["\n"]) != base
    assert call_key("m", [{"role": "user", "content": "What is 2+3?"}], 0.0, 16) != base
    # another precision gives other replies; float32's keys stay those of the caches written before it was a field
    assert call_key("m", MESSAGES, 0.0, 16, precision="bfloat16") != base
    assert call_key("m", MESSAGES, 0.0, 16, precision="float32") == base


def test_entries_persist_across_instances_and_hits_are_counted(tmp_path):
    path = tmp_path / "calls.sqlite"
    cache = CallCache(path)
    assert cache.get("k") is None
    cache.put("k", CachedCompletion("four", prompt_tokens=7, completion_tokens=1))
    cache.close()
    reopened = CallCache(path)
    assert reopened.get("k") == CachedCompletion("four", prompt_tokens=7, completion_tokens=1)
    assert (reopened.hits, reopened.misses) == (1, 0)
    assert len(reopened) == 1


def test_a_file_that_is_not_a_database_is_moved_aside_and_rebuilt(tmp_path):
    path = tmp_path / "calls.sqlite"
    path.write_bytes(b"this is not sqlite" * 200)
    cache = CallCache(path)
    assert cache.get("k") is None
    cache.put("k", CachedCompletion("fresh"))
    assert cache.get("k").text == "fresh"
    assert len(list(tmp_path.glob("calls.sqlite.corrupt-*[0-9]"))) == 1


def test_a_cache_damaged_while_open_is_rebuilt_not_misread(tmp_path):
    path = tmp_path / "calls.sqlite"
    cache = CallCache(path)
    for i in range(200):
        cache.put(f"k{i}", CachedCompletion(f"text {i}" * 20))
    cache.close()
    with sqlite3.connect(path) as conn:  # move every row from the WAL into the main file
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(path.read_bytes())
    data[4096:] = b"\xff" * (len(data) - 4096)  # trash every page after the first
    path.write_bytes(bytes(data))
    cache = CallCache(path)
    assert cache.get("k5") is None  # never a wrong answer: the damaged file is replaced by an empty one
    assert len(list(tmp_path.glob("calls.sqlite.corrupt-*[0-9]"))) == 1
    cache.put("k5", CachedCompletion("regenerated"))
    assert cache.get("k5").text == "regenerated"


def test_a_row_whose_checksum_fails_is_dropped(tmp_path):
    path = tmp_path / "calls.sqlite"
    cache = CallCache(path)
    cache.put("k", CachedCompletion("right"))
    with sqlite3.connect(path) as conn:  # a bit flip the sqlite layer cannot notice
        conn.execute("UPDATE completions SET payload = replace(payload, 'right', 'wrong')")
    assert cache.get("k") is None
    assert len(cache) == 0


def test_a_cache_locked_past_the_timeout_is_a_clear_user_error(tmp_path):
    path = tmp_path / "calls.sqlite"
    CallCache(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(UserError, match="stayed locked"):
            CallCache(path, busy_timeout_seconds=0.2).put("k", CachedCompletion("x"))
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def _write_rows(path: str, worker: int, count: int) -> None:
    cache = CallCache(path)
    for i in range(count):
        cache.put(f"w{worker}-{i}", CachedCompletion(f"text {worker} {i}"))
    cache.close()


def test_concurrent_writers_in_threads_and_processes_lose_nothing(tmp_path):
    path = str(tmp_path / "calls.sqlite")
    CallCache(path).close()
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_write_rows, args=(path, w, 40)) for w in range(2)]
    threads = [threading.Thread(target=_write_rows, args=(path, w, 40)) for w in (2, 3)]
    for job in processes + threads:
        job.start()
    for job in processes + threads:
        job.join(timeout=120)
    assert all(p.exitcode == 0 for p in processes)
    cache = CallCache(path)
    assert len(cache) == 160
    assert cache.get("w1-39").text == "text 1 39" and cache.get("w3-0").text == "text 3 0"
