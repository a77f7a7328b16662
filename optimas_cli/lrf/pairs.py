"""PreferencePair: one (x_k, y+, y-) comparison for a component, and its JSONL / `datasets` forms.

The JSONL file is written one line per pair and flushed, so a collection killed half-way keeps
every pair it finished; loading skips a truncated last line (the one being written when it died),
and the next append first cuts that partial line off so the file stays valid.
"""
from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from optimas_cli.errors import DataError

log = logging.getLogger(__name__)

PAIR_FIELDS = ("component", "context", "chosen", "rejected", "chosen_score", "rejected_score")


@dataclass
class PreferencePair:
    """For `component` and its inputs `context`, output `chosen` led to a higher expected global
    reward (`chosen_score`, a Monte Carlo mean; lrf.collect.labels=exact: the exact one) than output `rejected`
    (`rejected_score`)."""

    component: str
    context: dict
    chosen: dict
    rejected: dict
    chosen_score: float
    rejected_score: float
    meta: dict = field(default_factory=dict)  # provenance: choice values, collection stage, ...

    @property
    def gap(self) -> float:
        return self.chosen_score - self.rejected_score

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, row: dict) -> PreferencePair:
        missing = [f for f in PAIR_FIELDS if f not in row]
        if missing:
            raise KeyError(f"missing field(s) {missing}")
        return cls(
            component=str(row["component"]),
            context=dict(row["context"]),
            chosen=dict(row["chosen"]),
            rejected=dict(row["rejected"]),
            chosen_score=float(row["chosen_score"]),
            rejected_score=float(row["rejected_score"]),
            meta=dict(row.get("meta") or {}),
        )


def _to_json(value: Any) -> str:
    # default=str: outputs are meant to be JSON (text, lists, numbers); anything else is kept readable
    return json.dumps(value, ensure_ascii=False, default=str)


def _cut_partial_last_line(path: Path) -> None:
    """Drop the bytes after the last newline (a line cut off when a writer was killed)."""
    with open(path, "rb+") as fh:
        size = fh.seek(0, os.SEEK_END)
        if size == 0:
            return
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return
        block, end = 4096, size
        while end > 0:
            start = max(0, end - block)
            fh.seek(start)
            chunk = fh.read(end - start)
            idx = chunk.rfind(b"\n")
            if idx >= 0:
                fh.truncate(start + idx + 1)
                return
            end = start
        fh.truncate(0)


def append_pairs(path: str | os.PathLike, pairs: Iterable[PreferencePair]) -> int:
    """Append pairs to a JSONL file, one flushed line each; returns how many were written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        _cut_partial_last_line(path)
    n = 0
    with open(path, "a", encoding="utf-8") as fh:
        for pair in pairs:
            fh.write(_to_json(pair.to_dict()) + "\n")
            fh.flush()
            n += 1
        os.fsync(fh.fileno())
    return n


def save_pairs(path: str | os.PathLike, pairs: Iterable[PreferencePair]) -> int:
    """Write a fresh JSONL file atomically (the old one, if any, is replaced only when complete)."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    if tmp.exists():
        tmp.unlink()
    n = append_pairs(tmp, pairs)
    os.replace(tmp, path)
    return n


def load_pairs(path: str | os.PathLike) -> list[PreferencePair]:
    """Read a JSONL file of pairs; a truncated last line is skipped, a bad line elsewhere is an error."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"preference-pair file {path} does not exist", "run `optimas collect` first, or fix the path")
    lines = path.read_text(encoding="utf-8").split("\n")
    complete_tail = lines[-1] == ""  # the file ends with a newline: no partial last line
    pairs = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            pairs.append(PreferencePair.from_dict(json.loads(line)))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            if lineno == len(lines) and not complete_tail:
                log.warning("%s: skipping a truncated last line (a collection was interrupted)", path)
                break
            raise DataError(f"malformed preference pair in {path} line {lineno}: {exc}", "fix or remove that line") from None
    return pairs


def by_component(pairs: Iterable[PreferencePair]) -> dict[str, list[PreferencePair]]:
    grouped: dict[str, list[PreferencePair]] = {}
    for p in pairs:
        grouped.setdefault(p.component, []).append(p)
    return grouped
