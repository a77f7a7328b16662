"""Reading the local data directory: clear errors naming the file and line of a malformed row."""
from __future__ import annotations

import gzip
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from optimas_cli.errors import DataError

DATA_ENV = "OPTIMAS_DATA_DIR"


def data_root(data_dir: str | os.PathLike | None) -> Path | None:
    """The configured data directory (`data_dir`, else $OPTIMAS_DATA_DIR), or None when neither is set."""
    chosen = data_dir or os.environ.get(DATA_ENV)
    return Path(chosen).expanduser() if chosen else None


def local_file(data_dir: str | os.PathLike | None, *parts: str) -> Path | None:
    """The path of a data file when it exists locally; None means: fall back to the hub dataset."""
    root = data_root(data_dir)
    if root is None:
        return None
    path = root.joinpath(*parts)
    return path if path.exists() else None


def missing_data(what: str, parts: tuple[str, ...], hub_hint: str) -> DataError:
    return DataError(
        f"{what} not found: expected {'/'.join(parts)} under the data directory",
        f"set data_dir=<folder> (or ${DATA_ENV}) to a folder holding it, or go online so {hub_hint} can be loaded",
    )


def _open(path: Path):
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")


def read_jsonl(path: Path, validate: Callable[[dict], None] | None = None) -> Iterator[dict]:
    """Yield rows; a row that is not JSON, or fails `validate`, raises DataError with file and line."""
    with _open(path) as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                if validate:
                    validate(row)
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                raise DataError(f"malformed row in {path} line {lineno}: {exc}", "fix or remove that line") from None
            yield row


def read_json(path: Path) -> Any:
    try:
        with _open(path) as fh:
            return json.load(fh)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path} is not valid JSON (line {exc.lineno}: {exc.msg})", "restore the file") from None


def require_fields(row: dict, fields: tuple[str, ...]) -> None:
    missing = [f for f in fields if f not in row]
    if missing:
        raise KeyError(f"missing field(s) {missing}")
