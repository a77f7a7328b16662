"""The baselines' own libraries are an optional extra (pyproject's `baselines`): `pip install optimas` runs
Optimas and every method that needs none of them, and one that does is refused in one line before its run
folder is made, instead of failing where Hydra imports the method."""
from __future__ import annotations

import importlib.util

from optimas_cli.errors import UserError

EXTRA = "baselines"
# Each method module that imports a library of the extra (itself or through the modules it imports), with
# those libraries; tests/test_wheel_install.py checks this against the imports and pyproject's extra.
NEEDS = {
    "optimas_cli.methods.dspy_mipro": ("dspy", "optuna"),
    "optimas_cli.methods.textgrad": ("textgrad",),
    "optimas_cli.methods.tpe": ("optuna",),
}


def check_installed(target: str, name: str) -> None:
    """Before a run spends anything: the libraries method `name` (its `_target_`) imports are there (found,
    not imported, as the trackers' packages are)."""
    missing = [lib for lib in NEEDS.get(target.rpartition(".")[0], ()) if importlib.util.find_spec(lib) is None]
    if missing:
        raise UserError(f"method={name} needs {', '.join(missing)}, which the optional '{EXTRA}' extra installs",
                        f"pip install 'optimas[{EXTRA}]' (in a checkout: pip install -e '.[{EXTRA}]')")
