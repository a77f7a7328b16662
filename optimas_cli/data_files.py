"""Reading the local data directory: clear errors naming the file and line of a malformed row."""
from __future__ import annotations

import gzip
import json
import os
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from optimas_cli.errors import DataError

DATA_ENV = "OPTIMAS_DATA_DIR"
# The folder `make` points $OPTIMAS_DATA_DIR at (../shared/data beside the checkout): an activated venv
# or an IDE finds the same data without the variable.
CHECKOUT_DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"


def data_root(data_dir: str | os.PathLike | None) -> Path | None:
    """The configured data directory (`data_dir`, else $OPTIMAS_DATA_DIR, else ../shared/data beside the
    checkout when it exists), or None when there is none."""
    chosen = data_dir or os.environ.get(DATA_ENV)
    if chosen:
        return Path(chosen).expanduser()
    return CHECKOUT_DATA if CHECKOUT_DATA.is_dir() else None


def where_looked(data_dir: str | os.PathLike | None = None) -> str:
    """The data directory searched, and how it was chosen, for an error that names it."""
    if data_dir:
        return f"data_dir={data_dir}"
    if os.environ.get(DATA_ENV):
        return f"${DATA_ENV}={os.environ[DATA_ENV]}"
    if CHECKOUT_DATA.is_dir():
        return f"{CHECKOUT_DATA} (${DATA_ENV} unset)"
    return f"no data directory: data_dir and ${DATA_ENV} unset, and {CHECKOUT_DATA} does not exist"


def local_file(data_dir: str | os.PathLike | None, *parts: str) -> Path | None:
    """The path of a data file when it exists locally; None means: fall back to the hub dataset."""
    root = data_root(data_dir)
    if root is None:
        return None
    path = root.joinpath(*parts)
    return path if path.exists() else None


def missing_data(what: str, parts: tuple[str, ...], hub_hint: str, data_dir: str | os.PathLike | None = None) -> DataError:
    return DataError(
        f"{what} not found: expected {'/'.join(parts)} under the data directory (looked in {where_looked(data_dir)})",
        f"set data_dir=<folder> (or ${DATA_ENV}) to a folder holding it, or go online so {hub_hint} can be loaded",
    )


def _open(path: Path):
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")


def _first_non_utf8_line(path: Path) -> int | None:
    """The line holding the first byte that is not UTF-8 (text is decoded in blocks, so the decoder's
    own position does not say which line)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                return lineno
    return None


@contextmanager
def unreadable_as_data_error(path: Path):
    """A damaged file (truncated or corrupt gzip, bytes that are not UTF-8) becomes one DataError line;
    left alone, the decoder's message quotes kilobytes of the file."""
    try:
        yield
    except UnicodeDecodeError as exc:
        bad = exc.object[exc.start : exc.start + 1].hex()
        lineno = _first_non_utf8_line(path)
        raise DataError(f"{path}{f' line {lineno}' if lineno else ''} is not UTF-8 text (byte 0x{bad})",
                        "re-save the file as UTF-8 or restore it from its source") from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise DataError(f"{path} is truncated or corrupt ({exc})", "download or copy the file again") from None


def read_jsonl(path: Path, validate: Callable[[dict], None] | None = None) -> Iterator[dict]:
    """Yield rows; a row that is not JSON, or fails `validate`, raises DataError with file and line."""
    with unreadable_as_data_error(path), _open(path) as fh:
        for lineno, line in enumerate(fh):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                if validate:
                    validate(row)
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                raise DataError(f"malformed row in {path} line {lineno + 1}: {exc}", "fix or remove that line") from None
            yield row


def read_json(path: Path) -> Any:
    try:
        with unreadable_as_data_error(path), _open(path) as fh:
            return json.load(fh)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path} is not valid JSON (line {exc.lineno}: {exc.msg})", "restore the file") from None


def require_fields(row: dict, fields: tuple[str, ...]) -> None:
    missing = [f for f in fields if f not in row]
    if missing:
        raise KeyError(f"missing field(s) {missing}")
