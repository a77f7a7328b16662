"""A persistent call cache in sqlite: a re-run of the same experiment generates nothing.

One row per sample: the key hashes everything that decides the output (model, server, messages,
decoding settings, adapter content, and at temperature > 0 the seed and sample index), so n samples
at temperature > 0 are n rows while greedy calls share one. Each row carries a checksum of its key
and payload; a row that fails it is dropped and regenerated, never served.

Safe across processes and threads: WAL journal, a busy timeout, one autocommitted INSERT per row
(sqlite's atomic commit means a run killed mid-write leaves the previous state). A file that is not
a database (or is damaged) is moved aside and rebuilt; a file locked past the timeout is a UserError.
"""
from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from optimas_cli.errors import UserError

log = logging.getLogger(__name__)
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class CachedCompletion:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    finish_reason: str = "stop"


def call_key(
    model: str,
    messages: list[dict],
    temperature: float,
    max_tokens: int,
    stop: list[str] | None = None,
    seed: int | None = None,
    sample_index: int = 0,
    sample_offset: int = 0,
    adapter: str | None = None,  # the adapter's content fingerprint, not its path
    api_base: str | None = None,
    diverse_beam: tuple[int, float] | None = None,  # (groups, diversity penalty) of a diverse beam search
) -> str:
    """The cache key of one sample. Greedy decoding is deterministic, so at temperature 0 the seed and
    sample position do not enter the key and every sample of the same call is the same row. The
    candidates of one diverse beam search differ by position, so theirs does."""
    sampled = temperature > 0 and diverse_beam is None
    fields = {
        "model": model,
        "api_base": api_base,
        "messages": messages,
        "temperature": float(temperature),
        "max_tokens": int(max_tokens),
        "stop": list(stop or []),
        "adapter": adapter,
        "seed": seed if sampled else None,
        "sample": [sample_index, sample_offset] if sampled else None,
    }
    if diverse_beam is not None:  # only then: every other key stays what it was
        fields["diverse_beam"] = [int(diverse_beam[0]), float(diverse_beam[1]), sample_offset]
    return hashlib.sha256(json.dumps(fields, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _checksum(key: str, payload: str) -> str:
    return hashlib.sha256(f"{key}\n{payload}".encode()).hexdigest()


class CallCache:
    """get/put of CachedCompletion by key, with hit and miss counters."""

    def __init__(self, path: str | Path, busy_timeout_seconds: float = 30.0):
        self.path = Path(path).expanduser()
        self.busy_timeout_seconds = busy_timeout_seconds
        self.hits = self.misses = self.writes = 0
        self._lock = threading.Lock()
        self._conn = self._open()

    # ---- opening, and recovering from a damaged file -------------------------------------------
    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            return self._connect()
        except sqlite3.DatabaseError as error:
            self._raise_if_locked(error)
            self._move_aside(error)
            return self._connect()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout_seconds, check_same_thread=False,
                               isolation_level=None)  # autocommit: each INSERT is its own transaction
        try:
            conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_seconds * 1000)}")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable commits, no corruption on kill
            conn.execute(
                "CREATE TABLE IF NOT EXISTS completions ("
                " key TEXT PRIMARY KEY, payload TEXT NOT NULL, checksum TEXT NOT NULL, created REAL NOT NULL)"
            )
            conn.execute("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
            conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            (version,) = conn.execute("SELECT value FROM meta WHERE name='schema_version'").fetchone()
            if version != str(SCHEMA_VERSION):
                raise sqlite3.DatabaseError(f"cache schema version {version}, expected {SCHEMA_VERSION}")
        except BaseException:
            conn.close()
            raise
        return conn

    def _raise_if_locked(self, error: sqlite3.DatabaseError) -> None:
        message = str(error).lower()
        if "locked" in message or "busy" in message:
            raise UserError(
                f"the LM call cache {self.path} stayed locked for {self.busy_timeout_seconds:.0f}s ({error})",
                "another process holds it: wait for it, point OPTIMAS_CACHE_DIR (or lm.cache_dir) elsewhere, "
                "or run with lm.cache=false",
            ) from error

    def _move_aside(self, error: Exception) -> None:
        """Keep the damaged file for inspection and start an empty cache in its place."""
        aside = self.path.with_name(f"{self.path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
        log.warning("LM call cache %s is unreadable (%s); moved to %s and rebuilt", self.path, error, aside)
        self.path.replace(aside)
        for suffix in ("-wal", "-shm"):  # the journal of a damaged database belongs to it
            side = self.path.with_name(self.path.name + suffix)
            if side.exists():
                side.replace(aside.with_name(aside.name + suffix))

    def _recover(self, error: sqlite3.DatabaseError) -> None:
        self._raise_if_locked(error)
        self._conn.close()
        self._move_aside(error)
        self._conn = self._connect()

    # ---- reads and writes ----------------------------------------------------------------------
    def get(self, key: str) -> CachedCompletion | None:
        with self._lock:
            try:
                row = self._conn.execute("SELECT payload, checksum FROM completions WHERE key=?", (key,)).fetchone()
            except sqlite3.DatabaseError as error:
                self._recover(error)
                row = None
            entry = self._decode(key, row)
            if entry is None:
                self.misses += 1
            else:
                self.hits += 1
            return entry

    def _decode(self, key: str, row) -> CachedCompletion | None:
        if row is None:
            return None
        payload, checksum = row
        try:
            if checksum != _checksum(key, payload):
                raise ValueError("checksum mismatch")
            return CachedCompletion(**json.loads(payload))
        except (ValueError, TypeError) as error:
            log.warning("LM call cache %s: dropping a damaged entry (%s)", self.path, error)
            self._conn.execute("DELETE FROM completions WHERE key=?", (key,))
            return None

    def put(self, key: str, entry: CachedCompletion) -> None:
        payload = json.dumps(asdict(entry), sort_keys=True, ensure_ascii=False)
        row = (key, payload, _checksum(key, payload), time.time())
        with self._lock:
            try:
                self._conn.execute("INSERT OR REPLACE INTO completions VALUES (?, ?, ?, ?)", row)
            except sqlite3.DatabaseError as error:
                self._recover(error)
                self._conn.execute("INSERT OR REPLACE INTO completions VALUES (?, ?, ?, ?)", row)
            self.writes += 1

    def __len__(self) -> int:
        with self._lock:
            return self._conn.execute("SELECT COUNT(*) FROM completions").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._conn.close()
