"""The sandbox's private view of the filesystem, built inside a fresh mount namespace (root only).

- /tmp, /var/tmp and /dev/shm become small private tmpfs mounts, so the program's scratch files
  never reach the host's shared temporary folders and vanish with the namespace;
- everything else is made read-only (every mount, recursively), so no world-writable place of the
  host (/run/lock, /var/lock, /dev/mqueue, a stray 0777 folder or file) keeps what the program
  writes; only the scratch mounts and the work directory stay writable;
- directories that an unprivileged user cannot enter (typically /root, where pyenv puts the
  interpreter) are covered by an empty tmpfs, and only the paths the program needs (the
  interpreter, the virtual environment, its own work directory) are bind-mounted back in,
  the interpreter read-only. This hides the rest of such a folder (keys, tokens) as a bonus.
Standard library only: the launcher runs without site-packages.
"""
from __future__ import annotations

import os
import stat

from optimas_cli.sandbox import linux

SCRATCH_DIRS = ("/tmp", "/var/tmp", "/dev/shm")


def first_hidden_ancestor(path: str) -> str | None:
    """The top-most directory on `path` that users other than its owner may not enter, if any."""
    parts = path.strip("/").split("/")
    current = ""
    for part in parts:
        current = f"{current}/{part}"
        try:
            st = os.stat(current)
        except OSError:
            return None
        if stat.S_ISDIR(st.st_mode) and not st.st_mode & stat.S_IXOTH:
            return current
    return None


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _bind_back(fd: int, path: str, writable: bool) -> None:
    if os.path.isdir(f"/proc/self/fd/{fd}"):
        os.makedirs(path, mode=0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        open(path, "a").close()
    linux.mount(f"/proc/self/fd/{fd}", path, None, linux.MS_BIND | linux.MS_REC)
    if not writable:
        linux.mount(None, path, None, linux.MS_REMOUNT | linux.MS_BIND | linux.MS_RDONLY | linux.MS_NOSUID)


def private_filesystem(workdir: str, needed: list[str], hide_unreachable: bool, scratch_mb: int) -> dict:
    """Set up the private view; return what was covered. Must run after unshare(CLONE_NEWNS)."""
    os.umask(0o022)
    # Keep our mounts out of the host namespace.
    linux.mount(None, "/", None, linux.MS_REC | linux.MS_PRIVATE)
    covers = {d: "scratch" for d in SCRATCH_DIRS if os.path.isdir(d)}
    keep = {os.path.realpath(workdir): True}
    for p in needed:
        real = os.path.realpath(p)
        # A needed path inside a scratch folder (a checkout or virtual environment under /tmp) is
        # bound back read-only into the private tmpfs; one that contains a scratch folder ("/")
        # would undo the cover and is left to the hidden-ancestor rule below.
        if os.path.exists(real) and not any(_under(d, real) for d in covers):
            keep.setdefault(real, False)
    if hide_unreachable:
        for p in keep:
            hidden = first_hidden_ancestor(p)
            if hidden and hidden not in covers:
                covers[hidden] = "hidden"
    # Outer covers hide inner ones, so only the top-most of nested covers is mounted.
    covers = {c: kind for c, kind in covers.items() if not any(o != c and _under(c, o) for o in covers)}
    # Open what must come back before the covers hide it; a writable path outside every cover is
    # bound onto itself, so that it is a mount of its own that can stay writable under a read-only root.
    fds = {p: os.open(p, os.O_PATH) for p in keep if keep[p] or any(_under(p, c) for c in covers)}
    try:
        for cover, kind in sorted(covers.items()):
            options = f"size={scratch_mb}m,mode=1777" if kind == "scratch" else "size=1m,mode=0755"
            linux.mount("tmpfs", cover, "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, options)
        for p, fd in sorted(fds.items()):
            _bind_back(fd, p, writable=keep[p])
    finally:
        for fd in fds.values():
            os.close(fd)
    _read_only_except([c for c, kind in covers.items() if kind == "scratch"] + [p for p in fds if keep[p]])
    return {**{c: kind for c, kind in sorted(covers.items())}, "/": "read-only"}


def _read_only_except(writable: list[str]) -> None:
    """Every mount read-only, then the `writable` mounts (not what lies below them) writable again."""
    try:
        linux.set_read_only("/", recursive=True)
    except OSError as exc:
        if exc.errno not in (38, 22):  # ENOSYS/EINVAL: a kernel before 5.12, remount one by one
            raise
        for point in _mount_points():
            flags = linux.MS_REMOUNT | linux.MS_BIND | linux.MS_RDONLY | _locked_flags(point)
            try:
                linux.mount(None, point, None, flags)
            except OSError:
                continue  # a mount hidden under another one: unreachable anyway
    for path in writable:
        try:
            linux.set_read_only(path, recursive=False, read_only=False)
        except OSError:
            linux.mount(None, path, None, linux.MS_REMOUNT | linux.MS_BIND | _locked_flags(path))


def _mount_points() -> list[str]:
    with open("/proc/self/mountinfo") as fh:
        return [line.split()[4].encode().decode("unicode_escape") for line in fh]


def _locked_flags(point: str) -> int:
    """nosuid/nodev/noexec of the mount at `point`: a bind remount must repeat them."""
    st = os.statvfs(point)
    return ((linux.MS_NOSUID if st.f_flag & os.ST_NOSUID else 0) | (linux.MS_NODEV if st.f_flag & os.ST_NODEV else 0)
            | (linux.MS_NOEXEC if st.f_flag & os.ST_NOEXEC else 0))


def private_proc() -> None:
    """A /proc that shows only the new PID namespace (so host processes are not even listed)."""
    linux.mount("proc", "/proc", "proc", linux.MS_NOSUID | linux.MS_NODEV | linux.MS_NOEXEC)
