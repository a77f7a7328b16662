"""After a run: kill whatever the sandbox user still runs, and remove what it left in shared folders."""
from __future__ import annotations

import os
import shutil
import signal
import time

# World-writable folders a run without a mount namespace (so without the read-only root) may have
# written into: what its uid left at their top is removed.
SHARED_SCRATCH = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/dev/mqueue")


def _processes_of(uid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as fh:
                for line in fh:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:
                            pids.append(int(entry))
                        break
        except (OSError, ValueError):
            continue  # exited while we looked
    return pids


def kill_user_processes(uid: int, rounds: int = 50) -> int:
    """SIGKILL every process of `uid` until none is left (a fork bomb may still be forking); return how many."""
    killed = 0
    for _ in range(rounds):
        pids = _processes_of(uid)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        time.sleep(0.01)
    return killed


def remove_user_files(uid: int, folders: tuple[str, ...] = SHARED_SCRATCH) -> list[str]:
    """Remove the top-level entries `uid` created in world-writable folders; return their paths."""
    removed = []
    for folder in folders:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
                removed.append(entry.path)
            except OSError:
                continue
    return removed
