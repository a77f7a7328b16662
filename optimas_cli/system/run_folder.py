"""A run folder: resolved config, log, checkpoints, accounts and results.json, all written atomically."""
from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import time
from collections.abc import Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from optimas_cli.errors import UserError

ACCOUNTS_FILE = "accounts.json"
INTERRUPTED_PHASE = "interrupted"  # wall time a killed process spent past its last checkpoint
MIN_FREE_BYTES = 1 << 20  # what a run needs to start: its config, Hydra's .hydra/ files, the first log lines
LOCK_FILE = ".lock"  # one writer per folder: flock'd while a process runs in it, holds that process's pid


def adapters_found_in(config: Mapping[str, Any], folder: str | os.PathLike) -> dict[str, Any]:
    """`config` with each LoRA adapter path that no longer exists found again inside the run folder `folder`:
    the weights optimizers save adapters under <run>/adapters/, and a run folder that was moved, copied to
    another machine or written relative to another working directory still holds them there."""
    return {name: _adapter_here(value, Path(folder)) for name, value in config.items()}


def relative_inside(data: Any, folder: str | os.PathLike) -> Any:
    """`data` with every path inside `folder` (a string or a Path, at any depth) written relative to it:
    a run folder's files then name `adapters/...`, not where the machine kept the folder, and stay true
    when it moves; adapters_found_in finds them again when they are read back."""
    roots = tuple(dict.fromkeys(str(p) + os.sep for p in (Path(folder), Path(folder).resolve())))

    def walk(value: Any) -> Any:
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        if isinstance(value, str):
            root = next((r for r in roots if value.startswith(r)), None)
            return value[len(root):] if root else value
        if isinstance(value, Mapping):
            return {key: walk(v) for key, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [walk(v) for v in value]
        return value

    return walk(data)


def _adapter_here(value: Any, folder: Path) -> Any:
    if not isinstance(value, str) or "adapters/" not in value or Path(value).exists():
        return value
    moved = folder / value[value.rindex("adapters/"):]
    return str(moved) if moved.exists() else value


def lock_holder(path: str | os.PathLike) -> int | None:
    """The pid of the live process that holds the folder's lock, or None when no process does (a lock
    file left by a killed process is free: the kernel drops a flock with its holder)."""
    lock = Path(path) / LOCK_FILE
    if not lock.is_file():
        return None
    with open(lock, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return _pid_in(lock)
        fcntl.flock(handle, fcntl.LOCK_UN)
    return None


def refuse_if_locked(path: str | os.PathLike, what: str) -> None:
    """One line naming the holder when another process is writing in the folder."""
    pid = lock_holder(path)
    if pid is not None:
        raise UserError(f"{what} {path} is in use by another optimas process (pid {pid})",
                        f"wait for it to finish (or stop it: kill {pid}), or pick another folder")


def is_disk_full(error: BaseException) -> bool:
    return isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT)


def disk_full_error(folder: str | os.PathLike, error: OSError, command: str = "run") -> UserError:
    """One line for a run that filled its disk: every file is written atomically (or rewritten on
    resume), so the folder continues from its last checkpoint once there is space."""
    what = f", writing {error.filename}" if error.filename else ""
    try:
        free = f", {shutil.disk_usage(folder).free // 1024} KB free"
    except OSError:
        free = ""
    problem = f"no space left on the device of the run folder {folder}: its disk is full ({error.strerror}{what}{free})"
    if not (Path(folder) / "config.yaml").is_file():  # nothing of the run was written yet
        return UserError(problem, "free space there, then run the same command again")
    return UserError(problem, f"free space there, then continue: optimas {command} <same overrides> resume={folder}")


def check_free_space(path: str | os.PathLike) -> None:
    """Before Hydra writes its .hydra/ files (a failure there is Hydra's traceback, not ours)."""
    place = Path(path).absolute()
    while not place.exists() and place != place.parent:
        place = place.parent
    free = shutil.disk_usage(place).free
    if free < MIN_FREE_BYTES:
        raise UserError(f"no space left for the run folder {path} ({free // 1024} KB free on its device)",
                        "free space there, or pick another place: hydra.run.dir=<folder>")


def prepare_run_dir(path: str | os.PathLike) -> None:
    """Before Hydra writes in a folder named on the command line: it must be creatable, and not in
    use by another process (Hydra would overwrite that run's .hydra/ files before our lock is taken)."""
    refuse_if_locked(path, "the run folder")
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
        probe = Path(path) / f".write-probe-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as error:
        raise UserError(f"cannot write the run folder {path} ({error.strerror or error})",
                        "pick a writable place, e.g. hydra.run.dir=outputs/<name>") from None
    check_free_space(path)


def _pid_in(lock: Path) -> int | str:
    try:
        return int(lock.read_text().strip())
    except (OSError, ValueError):
        return "unknown"  # the holder is between taking the lock and writing its pid


class RunFolder:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        # When an earlier process last wrote here (a log line, a pair, a checkpoint): read before this
        # process writes anything, it dates the kill of the run this one resumes.
        self.last_write = max((f.stat().st_mtime for f in self.path.iterdir() if f.is_file()), default=None)

    def lock(self) -> None:
        """Become the folder's only writer, or raise a UserError naming the process that is; held
        until unlock() or this process's end (a kill included)."""
        handle = open(self.file(LOCK_FILE), "a+")  # no truncation: the holder's pid stays readable
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            refuse_if_locked(self.path, "the run folder")
            raise UserError(f"the run folder {self.path} is in use by another optimas process",
                            "wait for it to finish, or pick another folder") from None
        handle.truncate(0)
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._lock = handle

    def unlock(self) -> None:
        handle = getattr(self, "_lock", None)
        if handle is not None:
            handle.close()  # closing the file drops the flock
            self._lock = None

    def file(self, name: str) -> Path:
        return self.path / name

    def write_json(self, name: str, data: Any) -> Path:
        return self.write_text(name, json.dumps(relative_inside(data, self.path), indent=2, ensure_ascii=False, default=str))

    def write_text(self, name: str, text: str) -> Path:
        """Write to a temporary file then rename: a killed run (or a full disk) never leaves a
        half-written file, the previous version stays."""
        target = self.file(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        try:
            tmp.write_text(text)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise
        os.replace(tmp, target)
        return target

    def read_json(self, name: str, default: Any = None) -> Any:
        target = self.file(name)
        return json.loads(target.read_text()) if target.exists() else default

    def save_accounts(self, ctx) -> None:
        """What the run has spent so far (system runs, wall time, LM usage); written with every
        checkpoint, so a resumed run's results.json counts the work done before the kill. Written just
        before the file that marks the checkpoint done: a kill between the two (one file write) is the
        only moment whose work a resumed run counts twice."""
        usage = ctx.lm.usage() if callable(getattr(ctx.lm, "usage", None)) else {}
        self.write_json(ACCOUNTS_FILE, {"ledger": ctx.ledger.state(), "lm": usage, "saved_at": time.time()})

    def restore_accounts(self, ctx) -> float | None:
        """Go on counting from the last checkpoint; returns its time (None in a fresh folder).

        The killed process's wall time past the checkpoint is added under INTERRUPTED_PHASE; its LM
        calls past the checkpoint are counted when the resumed run replays them from the cache
        (LMClient.attach_run), so tokens and dollars come out as in an uninterrupted run."""
        saved = self.read_json(ACCOUNTS_FILE)
        if saved is None:
            return None
        ctx.ledger.restore(saved["ledger"])
        saved_at = saved.get("saved_at")
        if saved_at is not None and self.last_write is not None and self.last_write > saved_at:
            ctx.ledger.add_seconds(INTERRUPTED_PHASE, self.last_write - saved_at)
        if saved.get("lm") and hasattr(ctx.lm, "restore_usage"):
            ctx.lm.restore_usage(saved["lm"])
        return saved_at

    def __str__(self) -> str:
        return str(self.path)


@contextmanager
def uncounted(ctx):
    """Rebuilding in memory what a checkpoint already holds (a resumed loop's cached trajectories) is
    not new work: system runs and LM usage inside the block are not counted; wall time still is. Nor is
    it checked against the caps (system/caps.stops_mid_phase): the counts it adds are taken back."""
    ledger_state = ctx.ledger.state()
    lm_snapshot = ctx.lm.usage_snapshot() if hasattr(ctx.lm, "usage_snapshot") else None
    check, ctx.ledger.after_record = ctx.ledger.after_record, None
    try:
        yield
    finally:
        ctx.ledger.after_record = check
        ctx.ledger.restore_executions(ledger_state)
        if lm_snapshot is not None:
            ctx.lm.reset_usage(lm_snapshot)
