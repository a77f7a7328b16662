"""What the call cache does when its disk refuses (issue 26 item 2): a read-only file, directory or
mount is read from, and the terminal says new calls are not cached; a full disk is one UserError
with the cache left as it was; only a file that really is damaged is moved aside.

Each is the real thing in a user namespace, since root ignores file modes: the read-only file as
uid 1000 owning it (`unshare --map-user`), the read-only mount a read-only bind mount and the full
disk a 200 KB tmpfs (`unshare -rm`). Where user namespaces are not allowed they are skipped."""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from optimas_cli.errors import UserError
from optimas_cli.lm.cache import CachedCompletion, CallCache

ROOT = Path(__file__).resolve().parent.parent
# Open the cache, read a row written before, write `new` rows of 4 KB, report what happened.
PROBE = """
import json, sys
from optimas_cli.errors import UserError
from optimas_cli.lm.cache import CachedCompletion, CallCache
out = {}
try:
    cache = CallCache(sys.argv[1])
    out["hit"] = getattr(cache.get("k1"), "text", None)
    for i in range(int(sys.argv[2])):
        cache.put(f"new{i}", CachedCompletion("x" * 4000))
    out["rows"] = len(cache)
except UserError as error:
    out["error"] = str(error)
print(json.dumps(out))
"""


def fill(path: Path, rows: int = 10) -> None:
    cache = CallCache(path)
    for i in range(rows):
        cache.put(f"k{i}", CachedCompletion(f"text {i}"))
    cache.close()


def probe(cache: Path, new_rows: int, wrap: list[str] | None = None, setup: str = "") -> tuple[dict, str]:
    """Run PROBE in a subprocess, optionally inside `wrap` (unshare, setpriv) after shell `setup`."""
    command = f"{setup} {sys.executable} -c '{PROBE}' {cache} {new_rows}"
    proc = subprocess.run([*(wrap or []), "sh", "-c", command], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def namespaces_work() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "-rm", "sh", "-c", "mount -t tmpfs tmpfs /mnt 2>/dev/null || mount -t tmpfs tmpfs /tmp"],
        capture_output=True).returncode == 0


needs_namespaces = pytest.mark.skipif(not namespaces_work(), reason="no user namespaces to mount in")


def aside(folder: Path) -> list[Path]:
    return list(folder.glob("*.corrupt-*"))


@needs_namespaces
def test_a_read_only_file_is_read_from_and_new_calls_are_not_cached(tmp_path):
    fill(tmp_path / "calls.sqlite")
    os.chmod(tmp_path / "calls.sqlite", 0o444)
    # As an unprivileged user (root writes any file): uid 1000 in a user namespace, owning the file.
    wrap = ["unshare", "--map-user=1000", "--map-group=1000"] if os.geteuid() == 0 else None
    result, stderr = probe(tmp_path / "calls.sqlite", 3, wrap)
    assert result == {"hit": "text 1", "rows": 10}  # served from the file, nothing written
    assert "is read-only" in stderr and "new calls will not be cached" in stderr
    assert aside(tmp_path) == []  # before: called "unreadable", moved to .corrupt-* and rebuilt empty


@needs_namespaces
def test_a_read_only_mount_is_read_from_not_a_traceback(tmp_path):
    fill(tmp_path / "calls.sqlite")
    result, stderr = probe(tmp_path / "calls.sqlite", 3, ["unshare", "-rm"],
                           f"mount --bind {tmp_path} {tmp_path} && mount -o remount,bind,ro {tmp_path} &&")
    assert result == {"hit": "text 1", "rows": 10}  # before: a 51-line OSError from moving the file aside
    said = [line for line in stderr.splitlines() if line.startswith("optimas:")]  # (the rest: logging's fallback)
    assert len(said) == 1 and "new calls will not be cached" in said[0] and "Traceback" not in stderr
    assert aside(tmp_path) == [] and len(CallCache(tmp_path / "calls.sqlite")) == 10


@needs_namespaces
def test_a_cache_that_cannot_be_created_on_a_read_only_mount_runs_uncached(tmp_path):
    result, stderr = probe(tmp_path / "calls.sqlite", 3, ["unshare", "-rm"],
                           f"mount --bind {tmp_path} {tmp_path} && mount -o remount,bind,ro {tmp_path} &&")
    assert result == {"hit": None, "rows": 0}
    assert "cannot be created" in stderr and "new calls will not be cached" in stderr


@needs_namespaces
def test_a_full_disk_is_one_error_and_leaves_the_cache_as_it_was(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    copy = tmp_path / "after.sqlite"
    # In the namespace: a 200 KB disk, the good cache on it, then 200 rows of 4 KB that cannot all fit;
    # the cache is copied out (with its WAL, checkpointed) to count what it holds afterwards.
    result, stderr = probe(disk / "calls.sqlite", 200, ["unshare", "-rm"],
                           f"mount -t tmpfs -o size=200k tmpfs {disk} && "
                           f"{sys.executable} -c 'import sys; sys.path.insert(0, \"{ROOT}\"); "
                           f"from tests.test_lm_cache_failures import fill; fill(sys.argv[1])' {disk / 'calls.sqlite'} &&"
                           f" trap 'cp {disk}/calls.sqlite* {tmp_path}/' EXIT;")
    assert result["error"].startswith("no space left for the LM call cache") and "kept as it was" in result["error"]
    assert "hit" in result and result["hit"] == "text 1"
    kept = sorted(p.name for p in tmp_path.glob("calls.sqlite*"))
    assert not any("corrupt" in name for name in kept), kept  # before: the good cache moved aside, 0 rows left
    shutil.copy(tmp_path / "calls.sqlite", copy)
    for suffix in ("-wal", "-shm"):
        if (tmp_path / f"calls.sqlite{suffix}").exists():
            shutil.copy(tmp_path / f"calls.sqlite{suffix}", f"{copy}{suffix}")
    with sqlite3.connect(copy) as conn:
        assert conn.execute("SELECT COUNT(*) FROM completions WHERE key LIKE 'k%'").fetchone() == (10,)


@needs_namespaces
@pytest.mark.parametrize("filler_kb", [90, 100, 120])  # sqlite says "disk full" or, for the -shm/-wal, "disk I/O error"
def test_a_new_cache_on_a_full_disk_says_the_disk_is_full_and_leaves_no_file(tmp_path, filler_kb):
    """Issue 47: a cache begun on an almost full disk was "cannot be used (disk I/O error)" and left its
    calls.sqlite, -wal and -shm behind."""
    disk = tmp_path / "disk"
    disk.mkdir()
    result, _ = probe(disk / "calls.sqlite", 50, ["unshare", "-rm"],
                      f"mount -t tmpfs -o size=128k tmpfs {disk} && head -c {filler_kb * 1000} /dev/zero > {disk}/filler"
                      f" && trap 'ls -a {disk} > {tmp_path}/left' EXIT;")
    assert result["error"].startswith(f"no space left for the LM call cache {disk / 'calls.sqlite'}: its disk is full")
    assert (tmp_path / "left").read_text().split() == [".", "..", "filler"]


def test_an_error_that_is_not_damage_keeps_the_file(tmp_path, monkeypatch):
    """An I/O error on a file that passes sqlite's integrity check is one line, not a rebuilt cache."""
    path = tmp_path / "calls.sqlite"
    fill(path)

    def failing(self):
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(CallCache, "_connect", failing)
    with pytest.raises(UserError, match="cannot be used \\(disk I/O error\\)"):
        CallCache(path)
    monkeypatch.undo()
    assert aside(tmp_path) == [] and CallCache(path).get("k3").text == "text 3"


def test_a_file_that_fails_the_integrity_check_is_moved_aside(tmp_path, monkeypatch, capsys):
    path = tmp_path / "calls.sqlite"
    path.write_bytes(b"SQLite format 3\x00" + b"\x00" * 84 + b"\xff" * 4000)  # a header, then garbage
    cache = CallCache(path)
    assert cache.get("k") is None and len(aside(tmp_path)) == 1
    assert "is damaged" in capsys.readouterr().err  # said on the terminal, not only in the log
