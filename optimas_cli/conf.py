"""Where the Hydra configs live and what each config group offers."""
from __future__ import annotations

import os
from pathlib import Path

# conf/ sits at the project root (editable install); OPTIMAS_CONF_DIR points elsewhere if needed.
CONF_DIR = Path(os.environ.get("OPTIMAS_CONF_DIR", Path(__file__).resolve().parent.parent / "conf"))
GROUPS = ("pipeline", "method", "lm", "lrf", "budget", "experiment")


def options(group: str) -> list[str]:
    """The names a group accepts, e.g. options('pipeline') -> ['amazon', 'hotpotqa', ...]."""
    folder = CONF_DIR / group
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []
