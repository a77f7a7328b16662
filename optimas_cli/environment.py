"""Process-wide settings that must be in place before the heavy libraries are imported.

Set once, at the entry points (the `optimas` command, the scripts, the test suite), never as a side
effect of importing a library module. Each variable is a default: a value the user exported wins; the
working directory goes on the import path (a user's pipeline module beside their config).
"""
from __future__ import annotations

import os
import sys
import warnings

from optimas_cli.lm.paths import cache_root


def prepare_process() -> None:
    # Importing litellm otherwise fetches its cost map from the network (unreachable offline, and slow).
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    # OpenMP threads that spin while waiting make torch 6-7x slower when other processes share the
    # cores (measured: SmolLM2 decode on a busy 2-core machine); sleeping waiters cost nothing when
    # it is idle. Effective only before torch is imported.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    # TextGrad chooses its log folder when it is imported; keep it with our other caches.
    os.environ.setdefault("TEXTGRAD_LOG_DIR", str(cache_root() / "textgrad-logs"))
    # peft and trl 1.16 call transformers 5's renamed gradient_checkpointing_* methods by their old names when they
    # wrap a model and around every GRPO generation: three FutureWarnings a training step, and one per adapter the
    # embedded model loads, in the run's stderr, none of them about this code or the user's.
    warnings.filterwarnings("ignore", message=r"`(is_)?gradient_checkpointing\w*` is deprecated", category=FutureWarning)


def quiet_libraries() -> None:
    """Library defaults for a terminal run, set before those libraries are imported: litellm's
    per-call INFO lines and weight-loading bars would drown the run's own progress lines."""
    os.environ.setdefault("LITELLM_LOG", "ERROR")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def importable_here() -> None:
    """A user's pipeline module beside their config imports as it would under `python -m`: the working
    directory goes on the import path, for this process and the sweep jobs it starts."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if cwd not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (cwd, *paths) if p)
