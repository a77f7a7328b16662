"""Faults under load (issue 47) on the toy retriever (Optimas with a tiny BERT reward model; the LRF judge calls a
mock API model through litellm and the sqlite call cache):

1. a parallel sweep (joblib, 2 workers) sharing one call cache and one sweep folder, one worker SIGKILLed in the
   middle of its run and resumed: every results.json is its own job's, the resumed job ends as the jobs that were
   not interrupted, and the cache keeps every row (also: writers of one cache SIGKILLed mid-write);
2. a full disk at fixed points of a run, each writer failing as its library does (json, safetensors, the sqlite
   call cache): one line naming the full disk, no stray file, and `resume=` ends as an uninterrupted run.
"""
from __future__ import annotations

import errno
import logging
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest

from optimas_cli.cli import main
from optimas_cli.lm.cache import CallCache, _checksum
from optimas_cli.system.results_file import read_results
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
    results = read_results(folder)
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
        assert read_results(job)["config"]["lm"]["concurrency"] == concurrency
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


# -- 2. a full disk at fixed points of a run -----------------------------------------------------------------
# Each writer fails as its library does on a full disk (tests/test_disk_full.py sees each raise it on a real one),
# at a fixed write: before a byte of it, half-way, or once all of it is written (the flush or close failing). Before,
# a disk filled by a background writer while the run went on, and the test failed whenever the run won the race.
TQDM_BAR = re.compile(r"\|\s*\d+/\d+ \[")


def enospc() -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def safetensors_full() -> Exception:
    from safetensors import SafetensorError

    return SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")


def sqlite_full() -> sqlite3.OperationalError:
    error = sqlite3.OperationalError("database or disk is full")
    error.sqlite_errorname = "SQLITE_FULL"
    return error


def full_at(monkeypatch, writer: str, name: str, nth: int, when: str) -> None:
    """The nth write of a file called `name` by `writer` fails with its full-disk error `when` (before, during,
    after) it writes the file's bytes."""
    seen = []

    def failing(path, write) -> bool:
        if Path(path).name != name:
            return False
        seen.append(path)
        if len(seen) != nth:
            return False
        if when != "before":
            write()
            if when == "during":
                os.truncate(path, os.path.getsize(path) // 2)
        return True

    if writer == "json":  # RunFolder's files, each through a temporary file
        real_text = Path.write_text

        def write_text(self, text, *args, **kwargs):
            if failing(self, lambda: real_text(self, text, *args, **kwargs)):
                raise enospc()
            return real_text(self, text, *args, **kwargs)

        monkeypatch.setattr(Path, "write_text", write_text)
    elif writer == "safetensors":  # the local reward model's weights
        import safetensors.torch

        real_file = safetensors.torch.save_file

        def save_file(tensors, path, *args, **kwargs):
            if failing(path, lambda: real_file(tensors, path, *args, **kwargs)):
                raise safetensors_full()
            return real_file(tensors, path, *args, **kwargs)

        monkeypatch.setattr(safetensors.torch, "save_file", save_file)
    else:  # sqlite: a row of the LM call cache, written whole or not at all by sqlite's atomic commit
        connect = CallCache._connect

        class FullConnection:
            def __init__(self, conn):
                self.conn = conn

            def execute(self, sql, *args):
                if sql.startswith("INSERT OR REPLACE") and failing(Path(name), lambda: None):
                    raise sqlite_full()
                return self.conn.execute(sql, *args)

            def close(self):
                self.conn.close()

        monkeypatch.setattr(CallCache, "_connect", lambda self: FullConnection(connect(self)))


@pytest.fixture(scope="module")
def reference(bert, tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("reference")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OPENAI_API_KEY", ENV["OPENAI_API_KEY"])
        assert main(["run", *toy(bert, folder / "cache"), f"hydra.run.dir={folder / 'run'}"]) == 0
    return outcome(folder / "run")


@pytest.mark.parametrize("writer, name, nth, when", [
    *[("json", "loop_state.json.next.tmp", 2, when) for when in ("before", "during", "after")],  # iteration 1's state
    # lrf/, saved again in place after Stage 2's adaptation (Stage 1's save and the loop's first checkpoint came before)
    *[("safetensors", "backbone.safetensors.tmp", 3, when) for when in ("before", "during", "after")],
    ("sqlite", "lm_calls.sqlite", 1, "before"),  # the LRF judge's first call (sqlite's commit is all or nothing)
])
def test_a_full_disk_is_the_one_line_and_the_folder_resumes_to_the_uninterrupted_result(
        bert, tmp_path, reference, monkeypatch, capsys, writer, name, nth, when):
    run, cache = tmp_path / "run", tmp_path / "cache"
    monkeypatch.setenv("OPENAI_API_KEY", ENV["OPENAI_API_KEY"])
    monkeypatch.setattr(logging, "raiseExceptions", True)  # run_task turns it off on a full disk
    with monkeypatch.context() as patch:
        full_at(patch, writer, name, nth, when)
        with pytest.raises(SystemExit) as stop:
            main(["run", *toy(bert, cache), f"hydra.run.dir={run}"])
    # (in this process the libraries were imported before the CLI quiets their weight-loading bars)
    said = [line for line in capsys.readouterr().err.splitlines() if line.strip() and not TQDM_BAR.search(line)]
    device = re.escape(str(cache / name)) if writer == "sqlite" else f"the run folder {re.escape(str(run))}"
    assert stop.value.code == 2 and len(said) == 1 and re.fullmatch(
        f"optimas: no space left on the device of {device}: its disk is full \\(No space left on device, \\d+ KB "
        f"free\\) — free space there, then continue: optimas run <same overrides> resume={re.escape(str(run))}",
        said[0]), said
    assert stray(run) == [] and not (run / "results.json").exists()
    assert main(["run", *toy(bert, cache), f"resume={run}"]) == 0
    assert outcome(run) == reference and stray(run) == []
