"""Where the LM layer keeps its files: the call cache and the converted local models."""
from __future__ import annotations

import os
from pathlib import Path


def cache_root(configured: str | os.PathLike | None = None) -> Path:
    """The cache directory: an explicit setting, else $OPTIMAS_CACHE_DIR, else ~/.cache/optimas.

    One per-user folder by default so that every run on the machine shares converted models and
    cached calls; the environment override lets CI and clusters point it at scratch space.
    """
    if configured:
        return Path(configured).expanduser()
    env = os.environ.get("OPTIMAS_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "optimas"
