"""A run's results: results.json and, beside it, its bulk (results.bulk.json.gz). One writer, one reader.

results.json keeps, uncompressed, what a reader of a run's outcome reads: scores, counts, the ledger, the
config, what each history entry decided and when (`accepted`, `runs_so_far`). What grows with the examples
or the iterations goes gzipped into the bulk file: the per-example scores, the rest of each history entry (its
proposal, gate and evidence), the plan, the parse-failure rates and the chosen configuration (best_config.json
holds it too). read_results puts the two back together, so every reader sees the one dict the run computed,
whichever form the folder holds: a folder written before the split has it all in results.json.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import zlib
from pathlib import Path
from typing import Any

from optimas_cli.errors import UserError
from optimas_cli.system.run_folder import RunFolder, relative_inside, replaced

RESULTS = "results.json"
BULK = "results.bulk.json.gz"
BULK_KEY = "bulk"  # results.json's record of its bulk file: name and sha256, so a stale one is never merged
WHOLE = ("plan", "parse_failures", "best_config")  # top-level fields moved whole
PER_EXAMPLE = ("validation", "test", "test_initial")  # scored splits: their per_example list moves
HISTORY_KEPT = ("accepted", "runs_so_far")  # what stays of each history entry: what a reader counts and plots by cost


def split_results(results: dict) -> tuple[dict, dict]:
    """(what results.json keeps, the bulk) of a run's results; join_results is its inverse."""
    summary, bulk = dict(results), {}
    for key in WHOLE:
        if key in summary:
            bulk[key] = summary.pop(key)
    for key in PER_EXAMPLE:
        if isinstance(summary.get(key), dict) and "per_example" in summary[key]:
            summary[key] = {k: v for k, v in summary[key].items() if k != "per_example"}
            bulk[key] = {"per_example": results[key]["per_example"]}
    history = summary.get("history")
    if isinstance(history, list) and history and all(isinstance(e, dict) for e in history):
        summary["history"] = [{k: e[k] for k in HISTORY_KEPT if k in e} for e in history]
        bulk["history"] = [{k: v for k, v in e.items() if k not in HISTORY_KEPT} for e in history]
    return summary, bulk


def join_results(summary: dict, bulk: dict) -> dict:
    """The run's results from results.json's part and the bulk's: dicts merged key by key, history entries
    position by position."""
    whole = dict(summary)
    for key, value in bulk.items():
        kept = whole.get(key)
        if isinstance(kept, dict) and isinstance(value, dict):
            whole[key] = {**kept, **value}
        elif isinstance(kept, list) and isinstance(value, list) and len(kept) == len(value):
            whole[key] = [{**a, **b} for a, b in zip(kept, value, strict=True)]
        elif key in whole:
            raise ValueError(f"its {key!r} does not match results.json's")
        else:
            whole[key] = value
    return whole


def results_texts(results: dict) -> tuple[str, bytes | None]:
    """(results.json's text, the bulk file's bytes or None): compact and deterministic (gzip without a
    timestamp), so the same results always give the same files."""
    summary, bulk = split_results(results)
    packed = None
    if bulk:
        packed = gzip.compress(_compact(bulk).encode(), compresslevel=9, mtime=0)
        summary[BULK_KEY] = {"file": BULK, "sha256": hashlib.sha256(packed).hexdigest()}
    # One line per top-level field: grep finds a field, and a long history costs no indentation.
    lines = [f"{json.dumps(key, ensure_ascii=False)}: {_compact(value)}" for key, value in summary.items()]
    return "{\n" + ",\n".join(lines) + "\n}\n", packed


def write_results(folder: RunFolder, results: dict) -> dict:
    """Write `results` into `folder`: the bulk first, results.json (the mark of a finished run)
    last, each atomically; a bulk file no longer needed is removed. Returns `results`."""
    text, packed = results_texts(relative_inside(results, folder.path))
    if packed is None:
        folder.file(BULK).unlink(missing_ok=True)
    else:
        with replaced(folder.file(BULK)) as tmp:
            tmp.write_bytes(packed)
    folder.write_text(RESULTS, text)
    return results


def read_results(folder: str | os.PathLike) -> dict | None:
    """The run's results (results.json joined with its bulk), None when the folder has no results.json; a
    damaged file, or a bulk file that is not the one results.json names, is a UserError naming it."""
    target = Path(folder) / RESULTS
    if not target.exists():
        return None
    results = _read_json(target, target.read_bytes)
    if not isinstance(results, dict):
        raise UserError(f"{target} does not hold a JSON object", "restore it, or run the experiment again")
    record = results.pop(BULK_KEY, None)
    if record is None:
        return results  # written before the split, or nothing to split off
    bulk_file = Path(folder) / str(record.get("file") if isinstance(record, dict) else BULK)
    packed = _read_bytes(bulk_file)
    if not isinstance(record, dict) or hashlib.sha256(packed).hexdigest() != record.get("sha256"):
        raise UserError(f"{bulk_file} is not the file {target} was written with (its sha256 differs)",
                        "restore both files from the same copy, or run the experiment again")
    bulk = _read_json(bulk_file, lambda: gzip.decompress(packed))
    try:
        return join_results(results, bulk)
    except ValueError as error:
        raise UserError(f"{bulk_file} does not fit {target}: {error}",
                        "restore both files from the same copy, or run the experiment again") from None


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{path} is missing: results.json names it for the rest of the run's results",
                        "restore it beside results.json, or run the experiment again") from None
    except OSError as exc:
        raise UserError(f"{path} cannot be read ({exc.strerror or exc})", "check the file's permissions") from None


def _read_json(path: Path, data) -> Any:
    try:
        return json.loads(data().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise UserError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})",
                        "restore it, or run the experiment again") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path} is not valid JSON ({exc}); half-written or edited by hand",
                        "restore it, or run the experiment again") from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:  # not gzip, or a gzip stream cut short
        raise UserError(f"{path} is damaged ({exc})", "restore it, or run the experiment again") from None
    except OSError as exc:
        raise UserError(f"{path} cannot be read ({exc.strerror or exc})", "check the file's permissions") from None
