"""LoRA adapter folders: validation and a content fingerprint.

The fingerprint (not the path) identifies an adapter in the call cache and in the provider's loaded
adapter cache, so retraining an adapter into the same folder never serves stale outputs.
"""
from __future__ import annotations

import hashlib
import threading
from pathlib import Path

from optimas_cli.errors import UserError

_ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")
_memo: dict[tuple, str] = {}
_memo_lock = threading.Lock()


def adapter_folder(path: str) -> Path:
    folder = Path(path).expanduser()
    if not (folder / "adapter_config.json").is_file():
        raise UserError(
            f"LoRA adapter folder {str(folder)!r} has no adapter_config.json",
            "point the component at a folder written by peft's save_pretrained",
        )
    return folder.resolve()


def adapter_fingerprint(path: str) -> str:
    """sha256 over the adapter's config and weights, memoized by (path, size, mtime) of those files."""
    folder = adapter_folder(path)
    files = [folder / name for name in _ADAPTER_FILES if (folder / name).is_file()]
    stamp = (str(folder), *((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files))
    with _memo_lock:
        if stamp in _memo:
            return _memo[stamp]
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.name.encode())
        with f.open("rb") as handle:
            for block in iter(lambda h=handle: h.read(1 << 20), b""):
                digest.update(block)
    value = digest.hexdigest()
    with _memo_lock:
        _memo[stamp] = value
    return value
