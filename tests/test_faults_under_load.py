"""Faults under load (issue 47), each the real thing on the toy retriever (Optimas with a tiny BERT reward model;
the LRF judge calls a mock API model through litellm and the sqlite call cache):

1. a parallel sweep (joblib, 2 workers) sharing one call cache and one sweep folder, one worker SIGKILLed in the
   middle of its run and resumed: every results.json is its own job's, the resumed job ends as the jobs that were
   not interrupted, and the cache keeps every row (also: writers of one cache SIGKILLed mid-write);
2. a disk that fills in the middle of a run (a small tmpfs, mounted as root): one line naming the full disk, no
   stray file, and once space is freed `resume=` ends as an uninterrupted run.
"""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest

from optimas_cli.lm.cache import CallCache, _checksum
from tests.cli_runner import CLI, cli_env
from tests.test_lrf_tiny_backbone import build_tiny_bert

ENV = cli_env(OPENAI_API_KEY="sk-test-not-a-real-key")  # the mock API model needs none, litellm checks


@pytest.fixture(scope="module")
def bert(tmp_path_factory) -> str:
    return build_tiny_bert(tmp_path_factory.mktemp("bert"))


def toy(bert: str, cache: Path) -> list[str]:
    """The toy run of tests/test_budget_resume.py, as command-line overrides."""
    return ["pipeline=toy_retriever", "method=optimas", "budget=smoke", "budget.train_size=null",
            "budget.val_size=null", "budget.test_size=null", f"lrf.backbone={bert}", "lrf.max_length=120",
            "lrf.min_steps=20", "lm=openai", "+lm.mock_response=B", f"lm.cache_dir={cache}", "repeats=1",
            "lrf.min_test_pairs=0", "method.adaptation=paper"]


def start(*args: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([*CLI, *args], cwd=cwd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def finish(proc: subprocess.Popen, timeout: float = 240) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out, err


def outcome(folder: Path) -> dict:
    """What an interruption must not change: the history, the best configuration, validation and test scores."""
    results = json.loads((folder / "results.json").read_text())
    return {key: results[key] for key in ("history", "best_config", "validation", "test")}


def cache_rows(path: Path) -> dict[str, str]:
    """key -> payload of a call cache, checked whole: sqlite's integrity check, one row per key, every checksum."""
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        rows = conn.execute("SELECT key, payload, checksum FROM completions").fetchall()
    assert len(rows) == len({key for key, _, _ in rows})
    assert all(checksum == _checksum(key, payload) for key, payload, checksum in rows)
    return {key: payload for key, payload, _ in rows}


def stray(folder: Path) -> list[str]:
    """Files a writer leaves when it is cut off: half-written temporaries and write probes."""
    return sorted(p.name for p in folder.rglob("*") if p.name.endswith(".tmp") or ".write-probe" in p.name)


# -- 1. a worker of a parallel sweep killed ---------------------------------------------------------------
def test_a_killed_worker_of_a_parallel_sweep_resumes_to_the_uninterrupted_result(bert, tmp_path):
    """Three jobs on two workers, alike but for lm.concurrency (a transport setting: same calls, same results);
    jobs 0 and 1 run side by side on the shared cache, job 2's worker is killed after its Stage 1 collection
    (once 0 and 1 have finished: joblib stops the sweep when a worker dies, which would cut them off too)."""
    sweep, cache = tmp_path / "sweep", tmp_path / "cache"
    proc = start("run", "-m", *toy(bert, cache), "lm.concurrency=4,8,16", "hydra/launcher=joblib",
                 "hydra.launcher.n_jobs=2", f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    jobs = [sweep / f"{i}-toy_retriever-optimas" for i in range(3)]
    killed = None
    try:
        while proc.poll() is None and killed is None:
            if all((job / "results.json").exists() for job in jobs[:2]) and (jobs[2] / "pairs.jsonl").exists():
                killed = int((jobs[2] / ".lock").read_text())
                os.kill(killed, signal.SIGKILL)
            time.sleep(0.01)
    finally:
        rc, _, err = finish(proc)
    assert killed is not None, f"the sweep ended (rc {rc}) before job 2 could be killed in its run: {err[-2000:]}"
    assert not (jobs[2] / "results.json").exists()
    at_kill = cache_rows(cache / "lm_calls.sqlite")

    rc, out, err = finish(start("run", *toy(bert, cache), "lm.concurrency=16", f"resume={jobs[2]}", cwd=tmp_path))
    assert rc == 0, err[-3000:]

    for job, concurrency in zip(jobs, (4, 8, 16), strict=True):  # each results.json is its own job's
        assert json.loads((job / "results.json").read_text())["config"]["lm"]["concurrency"] == concurrency
        assert f"lm.concurrency={concurrency}" in (job / ".hydra" / "overrides.yaml").read_text()
        assert stray(job) == []
    assert outcome(jobs[2]) == outcome(jobs[0]) == outcome(jobs[1])
    assert outcome(jobs[0])["history"]  # the runs really optimized: there is something to compare
    rows = cache_rows(cache / "lm_calls.sqlite")
    assert rows and at_kill.items() <= rows.items()  # nothing written before the kill was lost or changed


WRITER = """
import sys
from optimas_cli.lm.cache import CachedCompletion, CallCache
cache, name, rows = CallCache(sys.argv[1]), sys.argv[2], int(sys.argv[3])
for i in range(rows):
    cache.put(f"{name}-{i}", CachedCompletion(f"{name} {i} " + "x" * 500))
    cache.put(f"shared-{i}", CachedCompletion(f"shared {i}"))  # every writer writes these same keys
    print(i, flush=True)  # acknowledged: its put returned
"""


def test_writers_of_one_cache_killed_mid_write_lose_no_acknowledged_row(tmp_path):
    path, rows = tmp_path / "calls.sqlite", 1500
    CallCache(path).close()  # created before the writers race to create it
    writers = {name: subprocess.Popen([sys.executable, "-c", WRITER, str(path), name, str(rows)], env=ENV,
                                      stdout=subprocess.PIPE, text=True) for name in ("a", "b", "c")}
    acknowledged = -1
    for line in writers["b"].stdout:
        acknowledged = int(line)
        if acknowledged >= 100:
            writers["b"].kill()  # SIGKILL, mid-way through its writes
            break
    for name, proc in writers.items():
        proc.communicate(timeout=120)
        assert proc.returncode == (-signal.SIGKILL if name == "b" else 0)
    stored = cache_rows(path)
    assert all(f"{name}-{i}" in stored for name in "ac" for i in range(rows))
    assert all(f"b-{i}" in stored for i in range(acknowledged + 1))
    assert all(f"shared-{i}" in stored for i in range(rows))
    assert not [p for p in tmp_path.iterdir() if "corrupt" in p.name]  # nothing was taken for damage


# -- 2. a disk that fills in the middle of a run ------------------------------------------------------------
@pytest.fixture
def small_disk(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(disk)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"mounting a 3 MB tmpfs is not permitted here (needs root): {mounted.stderr.strip()}")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=True)


def fill(disk: Path) -> Path:
    """Take every byte left on the disk, as another program writing there would."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError:
        pass
    finally:
        os.close(fd)
    return filler


def test_a_disk_that_fills_mid_run_stops_in_one_line_and_resumes_to_the_uninterrupted_result(bert, tmp_path,
                                                                                              small_disk):
    run, cache = small_disk / "run", small_disk / "cache"  # the run folder and the call cache on the small disk
    reference = start("run", *toy(bert, tmp_path / "ref_cache"), f"hydra.run.dir={tmp_path / 'ref'}", cwd=tmp_path)
    proc = start("run", *toy(bert, cache), f"hydra.run.dir={run}", cwd=tmp_path)
    filler = None
    try:
        while proc.poll() is None and filler is None:
            if (run / "loop_state.json").exists():  # Stage 1 done, the loop under way
                filler = fill(small_disk)
            time.sleep(0.01)
    finally:
        rc, _, err = finish(proc)
    assert filler is not None, f"the run ended (rc {rc}) before the disk could fill: {err[-2000:]}"
    said = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and len(said) == 1, err[-3000:]
    assert "no space left" in said[0] and "its disk is full" in said[0] and str(small_disk) in said[0], said[0]
    assert stray(run) == []
    assert not (run / "results.json").exists()

    filler.unlink()  # space is back
    rc, _, err = finish(start("run", *toy(bert, cache), f"resume={run}", cwd=tmp_path))
    assert rc == 0, err[-3000:]
    rc, _, err = finish(reference)
    assert rc == 0, err[-3000:]
    assert outcome(run) == outcome(tmp_path / "ref")
    # The cache may keep its -wal (and -shm): rows committed while the disk was full, which sqlite could not fold
    # into the database then; the next process that opens the cache folds them in. No other file.
    assert stray(run) == [] and {p.name for p in cache.iterdir()} <= {"lm_calls.sqlite", "lm_calls.sqlite-wal",
                                                                       "lm_calls.sqlite-shm"}
    assert cache_rows(cache / "lm_calls.sqlite").keys() == cache_rows(tmp_path / "ref_cache" / "lm_calls.sqlite").keys()
    assert sorted(p.name for p in cache.iterdir()) == ["lm_calls.sqlite"]  # folded in by the check's own open

