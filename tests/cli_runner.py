"""The `optimas` CLI as a user runs it: a subprocess of this checkout, offline, output captured."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "optimas_cli.cli"]


def cli_env(pythonpath: str = "", **extra: str) -> dict:
    """Offline (no hub, no litellm cost-map fetch); PYTHONPATH first names this checkout, so an optimas_cli
    installed elsewhere never answers instead; `pythonpath` adds a user's own code after it."""
    path = os.pathsep.join(p for p in (str(ROOT), pythonpath) if p)
    return {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "PYTHONPATH": path, **extra}


def optimas(*args: str, cwd: Path, pythonpath: str = "", timeout: float = 420) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], cwd=cwd, env=cli_env(pythonpath), capture_output=True, text=True,
                          timeout=timeout)
