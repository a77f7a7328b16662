"""A run folder: resolved config, log, checkpoints, accounts and results.json, all written atomically."""
from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shutil
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from optimas_cli.errors import UserError

ACCOUNTS_FILE = "accounts.json"
INTERRUPTED_PHASE = "interrupted"  # wall time a killed process spent past its last checkpoint
MIN_FREE_BYTES = 1 << 20  # what a run needs to start: its config, Hydra's .hydra/ files, the first log lines
LOCK_FILE = ".lock"  # one writer per folder: flock'd while a process runs in it, holds that process's pid
# What a run folder holds before the run does any work: a folder with nothing else failed before it
# started (a bad pipeline, missing data), so there is nothing to resume.
BEFORE_START = {"config.yaml", "config.resumed.yaml", "optimas.log", ".hydra", LOCK_FILE}
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)  # a full disk, a full quota
TORCH_SHORT_WRITE = ("PytorchStreamWriter failed writing", "unexpected pos")  # how torch.save says a write fell short
STAGED = ".next"  # the suffix of a checkpoint's files before they are moved into place
COMMIT_FILE = "checkpoint.commit"  # names a committed checkpoint's staged files until they are all in place


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


@contextmanager
def replaced(path: Path) -> Iterator[Path]:
    """A temporary file beside `path` to write, moved onto it once written whole, removed if the write fails (a
    full disk included): a killed run never leaves a half-written file, the previous version stays."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        yield tmp
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)


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


def failed_before_start(folder: Path) -> str | None:
    """The error a run stopped on before doing any work (the last error its log holds, and no file
    besides its config and log), or None: a run that started, or was killed, can be resumed."""
    try:
        if any(entry.name not in BEFORE_START for entry in folder.iterdir()):
            return None
        lines = (folder / "optimas.log").read_text(errors="replace").splitlines()
    except OSError:
        return None
    error = next((line.split("[ERROR] - ", 1)[1] for line in reversed(lines) if "[ERROR] - " in line), None)
    return f"the run failed before it started: {error}" if error else None


def disk_full(error: BaseException | None) -> OSError | None:
    """The full disk behind a writer's failure, anywhere in the chain of its causes, as an OSError; None when
    the failure is another. Each writer says it its own way: Python's file writes raise OSError ENOSPC (EDQUOT:
    a full quota), safetensors a SafetensorError naming the OS error, torch.save's zip writer a RuntimeError about
    the short write it made (which on a run's disk is a full one), the LM call cache (sqlite) a UserError raised
    from an OSError."""
    seen = set()
    while error is not None and id(error) not in seen:  # a chain can loop back (an exception re-raised in its handler)
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in DISK_FULL:
            return error
        said = re.search(r"os error (\d+)", str(error)) if type(error).__name__ == "SafetensorError" else None
        if said and int(said[1]) in DISK_FULL:
            return OSError(int(said[1]), os.strerror(int(said[1])))
        if isinstance(error, RuntimeError) and any(text in str(error) for text in TORCH_SHORT_WRITE):
            return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        error = error.__cause__ or error.__context__
    return None


def disk_full_error(folder: str | os.PathLike, error: OSError, command: str = "run") -> UserError:
    """One line for a run that filled a disk, its run folder's or its LM call cache's: every file is written
    atomically (or rewritten on resume), so the folder continues from its last checkpoint once there is space."""
    elsewhere = error.filename and Path(folder).resolve() not in Path(error.filename).resolve().parents
    device = error.filename if elsewhere else f"the run folder {folder}"
    what = f", writing {error.filename}" if error.filename and not elsewhere else ""
    try:
        free = f", {shutil.disk_usage(Path(error.filename).parent if elsewhere else folder).free // 1024} KB free"
    except OSError:
        free = ""
    problem = f"no space left on the device of {device}: its disk is full ({error.strerror}{what}{free})"
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


def damaged_file(path: str | os.PathLike, why: str) -> UserError:
    """One line for a run folder's file that cannot be read as the run wrote it (cut short by a copy, a
    crash of the disk, a hand edit): going on from a guess at its content would compute the wrong thing."""
    return UserError(f"{path} is damaged ({why})",
                     "restore the file from a copy, or start over in a new run folder (without resume=)")


def read_state(path: str | os.PathLike, default: Any = None) -> Any:
    """A JSON state file of a run folder (a checkpoint, accounts.json), or `default` when there is none."""
    path = Path(path)
    if not path.exists():
        return default
    try:
        return json.loads(path.read_text())
    except ValueError as error:  # not JSON, or not UTF-8 (UnicodeDecodeError is a ValueError)
        raise damaged_file(path, str(error).splitlines()[0]) from None


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
        until unlock() or this process's end (a kill included). The writer first recovers the last checkpoint."""
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
        self.recover()

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
        target = self.file(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        with replaced(target) as tmp:
            tmp.write_text(text)
        return target

    def read_json(self, name: str, default: Any = None) -> Any:
        return read_state(self.file(name), default)

    def checkpoint(self, ctx, files: Mapping[str, Any] | None = None) -> None:
        """What the run has spent so far (system runs, wall time, LM usage: accounts.json, so a resumed run's
        results.json counts the work done before the kill) and the files that mark that work done (name ->
        JSON data), as one commit: each file is staged under a new name, the commit file naming them is
        written last, then each is moved into place. A kill or a full disk anywhere in it leaves the whole
        previous checkpoint or the whole new one (recover() finishes a committed one): a resumed run never
        counts work twice, nor forgets work its state says was done."""
        usage = ctx.lm.usage() if callable(getattr(ctx.lm, "usage", None)) else {}
        staged = {ACCOUNTS_FILE: {"ledger": ctx.ledger.state(), "lm": usage, "saved_at": time.time()}, **(files or {})}
        for name, data in staged.items():
            self.write_json(name + STAGED, data)
        self.write_json(COMMIT_FILE, list(staged))
        self.recover()

    def recover(self) -> None:
        """Finish the checkpoint a kill interrupted after its commit, and drop the staged files of one it
        interrupted before: by the folder's one writer, before it reads anything (lock()), and by each commit."""
        for name in self.read_json(COMMIT_FILE, []):
            if self.file(name + STAGED).exists():
                os.replace(self.file(name + STAGED), self.file(name))
        self.file(COMMIT_FILE).unlink(missing_ok=True)
        for uncommitted in self.path.glob(f"*{STAGED}"):
            uncommitted.unlink()

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
