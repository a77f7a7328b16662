"""Which code a run ran, as results.json records it (`code`) and trackers and `optimas report` read it."""
from __future__ import annotations

import subprocess
from collections import Counter
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


@cache  # once per process: the code a process runs does not change under it
def code_record() -> dict:
    return describe(PACKAGE)


def describe(package: Path) -> dict:
    """The commit of the git checkout that tracks `package` and whether tracked files differ from it (`dirty`);
    outside one (an installed wheel, even inside another project's checkout) both are null and the
    installed `version` names the code. Never raises: without git the record is the version only."""
    tracked = _git(package, "ls-files", "--error-unmatch", "__init__.py") is not None
    commit = _git(package, "rev-parse", "HEAD") if tracked else None
    status = _git(package, "status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit, "dirty": None if status is None else bool(status), "version": _version()}


def _git(folder: Path, *args: str) -> str | None:
    """git's output in `folder`; None where git is missing, fails or hangs."""
    try:  # no optional locks: reading the status must not rewrite the index of a checkout someone is editing
        done = subprocess.run(["git", "--no-optional-locks", *args], cwd=folder, capture_output=True, text=True,
                              timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _version() -> str | None:
    try:
        return version("optimas")
    except PackageNotFoundError:  # imported from a source tree that was never installed
        return None


def code_label(record: dict | None) -> str | None:
    """'abc1234', 'abc1234 dirty' or 'version 0.1.0'; None for a run that recorded no code (older runs, or a
    hand-edited record)."""
    if not isinstance(record, dict):
        return None
    if record.get("commit"):
        return str(record["commit"])[:7] + (" dirty" if record.get("dirty") else "")
    return f"version {record['version']}" if record.get("version") else None


def mixed_code_note(records: list[dict | None]) -> str:
    """One line when these runs ran different code, uncommitted code or code they did not record; '' when
    they all ran the same clean commit (or the same installed version)."""
    counts = Counter(code_label(r) for r in records)
    unknown = counts.pop(None, 0)
    dirty = any(label.endswith(" dirty") for label in counts)
    if len(counts) <= 1 and not unknown and not dirty:
        return ""
    parts = []
    if counts:
        versions = ", ".join(f"{label} ({_plural(n, 'run')})" for label, n in counts.most_common())
        parts.append(f"rows come from {_plural(len(counts), 'code version')}: {versions}")
    if unknown:
        parts.append(f"{_plural(unknown, 'run')} record{'s' if unknown == 1 else ''} no commit")
    return "Code: " + "; ".join(parts) + "; runs.csv has each run's."


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
