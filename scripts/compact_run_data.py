"""Store run folders in proportion before committing them (issue 58), in place and losing nothing.

For every run folder (a folder holding results.json) under the given folders (packed ones are left as they are):
- results.json is rewritten as `optimas run` writes it now: its summary, and the rest in results.bulk.json.gz
  (optimas_cli/system/results_file.py); a folder written before the split reads back the same either way;
- predictions.jsonl.gz is repacked as predictions.jsonl.xz (the same lines; xz's window stores once the passages
  that each split and repeat repeat; optimas_cli/system/traces.py reads both);
- in a folder pruned to its results (no traces: a benchmark's finished run, scripts/synthetic_benchmark.py), a
  config.yaml or best_config.json that only repeats results.json's config or best_config is removed.
Each change is checked before the old file goes: the folder reads back the same results and traces.
With --pack, each folder named is then packed whole into `<folder>.runs.tar.xz` (optimas_cli/report/run_archive.py:
`optimas report` and `optimas show` read it as the folder), and the folder goes once the archive unpacks to the
same files, byte for byte.

    python scripts/compact_run_data.py docs/results
    python scripts/compact_run_data.py --pack docs/results/amazon-cpu/runs
"""
from __future__ import annotations

import argparse
import gzip
import json
import lzma
import shutil
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from optimas_cli.report.run_archive import pack, unpacked  # noqa: E402
from optimas_cli.system.results_file import BULK, RESULTS, read_results, results_texts  # noqa: E402
from optimas_cli.system.traces import PACKED, PREDICTIONS, predictions_path, read_predictions  # noqa: E402

XZ_PRESET = 9 | lzma.PRESET_EXTREME


def same(a, b) -> bool:
    """Equal as JSON (NaN included, which == never finds equal)."""
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def compact_results(folder: Path) -> None:
    results = read_results(folder)
    text, packed = results_texts(results)
    if packed is None:
        (folder / BULK).unlink(missing_ok=True)
    else:
        (folder / BULK).write_bytes(packed)
    (folder / RESULTS).write_text(text)
    if not same(read_results(folder), results):
        sys.exit(f"error: {folder} does not read back the same results; restore it from git")


def repack_traces(folder: Path) -> None:
    gz = folder / PREDICTIONS
    if not gz.exists():
        return
    lines = read_predictions(gz)
    (folder / PACKED).write_bytes(lzma.compress(gzip.decompress(gz.read_bytes()), preset=XZ_PRESET))
    if not same(read_predictions(folder / PACKED), lines):
        sys.exit(f"error: {folder / PACKED} does not read back the same traces")
    gz.unlink()


def drop_copies(folder: Path) -> None:
    if predictions_path(folder) is not None:
        return  # a whole run folder: its config.yaml and best_config.json are what resume and eval read
    results = read_results(folder)
    copies = {"config.yaml": lambda p: yaml.safe_load(p.read_text()) == results.get("config"),
              "best_config.json": lambda p: same(json.loads(p.read_text()), results.get("best_config"))}
    for name, repeats in copies.items():
        if (folder / name).exists() and repeats(folder / name):
            (folder / name).unlink()


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def pack_whole(folder: Path) -> None:
    if not folder.is_dir():
        sys.exit(f"error: {folder} is not a folder (packed already?); nothing packed")
    archive = pack(folder)
    if files_of(unpacked(archive)) != files_of(folder):
        archive.unlink()
        sys.exit(f"error: {archive} does not unpack to the files of {folder}; the folder is left as it was")
    shutil.rmtree(folder)
    print(f"{folder} -> {archive.name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", help="folders holding run folders (searched below)")
    parser.add_argument("--pack", action="store_true", help="then pack each folder named into <folder>.runs.tar.xz")
    args = parser.parse_args()
    folders = sorted({f.parent for top in args.folders for f in Path(top).rglob(RESULTS)})
    for folder in folders:
        compact_results(folder)
        repack_traces(folder)
        drop_copies(folder)
    print(f"{len(folders)} run folders stored in proportion")
    if args.pack:
        for top in args.folders:
            pack_whole(Path(top))


if __name__ == "__main__":
    main()
