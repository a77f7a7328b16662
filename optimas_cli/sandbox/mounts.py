"""The sandbox's private view of the filesystem, built inside a fresh mount namespace (root only).

- /tmp, /var/tmp and /dev/shm become small private tmpfs mounts, so the program's scratch files
  never reach the host's shared temporary folders and vanish with the namespace; the work
  directory too (a copy of the runner's files, `work_mb` in all), so the disk cannot be filled;
- the host's services are out of reach: /run and /var/run (where D-Bus, Postgres, systemd keep
  their sockets) are covered by an empty tmpfs, and every other Unix socket the host has bound
  (listed in /proc/net/unix before the network namespace was left) is covered by an empty file,
  so a connect() finds no socket (a socket's permissions, not the read-only mount, decide
  whether it may be connected to);
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
import shutil
import stat

from optimas_cli.sandbox import linux

SCRATCH_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
SERVICE_DIRS = ("/run", "/var/run")  # hidden behind an empty tmpfs: the host's sockets, pid files, locks
SOCKET_COVER = ".optimas-no-socket"  # the empty file bound over each host socket left visible


def host_unix_sockets() -> list[str]:
    """Paths of the Unix sockets bound in this network namespace (read before leaving it)."""
    paths = []
    try:
        with open("/proc/net/unix", encoding="utf-8", errors="replace") as fh:
            next(fh, None)
            for line in fh:
                fields = line.rstrip("\n").split(None, 7)
                if len(fields) == 8 and fields[7].startswith("/"):  # "@..." is abstract: per network namespace
                    paths.append(fields[7])
    except OSError:
        pass
    return sorted(set(paths))


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


def _bind_back(fd: int, path: str) -> None:
    """Bind what `fd` opened back at `path` under a cover, read-only."""
    if os.path.isdir(f"/proc/self/fd/{fd}"):
        os.makedirs(path, mode=0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        open(path, "a").close()
    linux.mount(f"/proc/self/fd/{fd}", path, None, linux.MS_BIND | linux.MS_REC)
    linux.mount(None, path, None, linux.MS_REMOUNT | linux.MS_BIND | linux.MS_RDONLY | linux.MS_NOSUID)


def private_filesystem(workdir: str, needed: list[str], hide_unreachable: bool, scratch_mb: int,
                       work_mb: int, owner: int | None, sockets: list[str]) -> dict:
    """Set up the private view; return what was covered. Must run after unshare(CLONE_NEWNS)."""
    os.umask(0o022)
    # Keep our mounts out of the host namespace.
    linux.mount(None, "/", None, linux.MS_REC | linux.MS_PRIVATE)
    covers = {d: "scratch" for d in SCRATCH_DIRS if os.path.isdir(d)}
    for d in SERVICE_DIRS:
        real = os.path.realpath(d)  # /var/run is usually a link to /run
        if os.path.isdir(real):
            covers.setdefault(real, "hidden")
    work = os.path.realpath(workdir)
    keep = set()
    for p in needed:
        real = os.path.realpath(p)
        # A needed path inside a scratch folder (a checkout or virtual environment under /tmp) is
        # bound back read-only into the private tmpfs; one that contains a scratch folder ("/")
        # would undo the cover and is left to the hidden-ancestor rule below.
        if os.path.exists(real) and not any(_under(d, real) for d in covers):
            keep.add(real)
    if hide_unreachable:
        for p in [work, *keep]:
            hidden = first_hidden_ancestor(p)
            if hidden and hidden not in covers:
                covers[hidden] = "hidden"
    # Outer covers hide inner ones, so only the top-most of nested covers is mounted.
    covers = {c: kind for c, kind in covers.items() if not any(o != c and _under(c, o) for o in covers)}
    # Open what must come back before the covers hide it; a read-only path outside every cover
    # needs nothing (the root turns read-only); the work directory is copied into a tmpfs of its own.
    work_fd = os.open(work, os.O_RDONLY | os.O_DIRECTORY)
    fds = {p: os.open(p, os.O_PATH) for p in keep if any(_under(p, c) for c in covers)}
    try:
        for cover, kind in sorted(covers.items()):
            options = f"size={scratch_mb}m,mode=1777" if kind == "scratch" else "size=1m,mode=0755"
            linux.mount("tmpfs", cover, "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, options)
        for p, fd in sorted(fds.items()):
            _bind_back(fd, p)
        _private_work_dir(work_fd, work, work_mb, owner)
    finally:
        for fd in [work_fd, *fds.values()]:
            os.close(fd)
    hidden_sockets = _cover_sockets(sockets, blank_dir=next((c for c in covers if _under("/run", c)), "/dev/shm"))
    _read_only_except([c for c, kind in covers.items() if kind == "scratch"] + [work])
    return {**{c: kind for c, kind in sorted(covers.items())}, **{p: "socket" for p in hidden_sockets},
            work: f"tmpfs {work_mb} MB", "/": "read-only"}


def _private_work_dir(source_fd: int, path: str, size_mb: int, owner: int | None) -> None:
    """A tmpfs of `size_mb` at `path` holding a copy of the runner's files: the program's writes
    there are bounded as a whole (and vanish with the namespace), not only file by file."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    ids = f",uid={owner},gid={owner}" if owner is not None else ""
    linux.mount("tmpfs", path, "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, f"size={size_mb}m,mode=0700{ids}")
    shutil.copytree(f"/proc/self/fd/{source_fd}", path, symlinks=True, dirs_exist_ok=True)
    if owner is not None:
        for folder, dirs, files in os.walk(path):
            for name in [*dirs, *files]:
                os.lchown(os.path.join(folder, name), owner, owner)


def _cover_sockets(sockets: list[str], blank_dir: str) -> list[str]:
    """Bind an empty file over each host socket still visible: connect() then finds no socket."""
    blank = os.path.join(blank_dir, SOCKET_COVER)
    covered = []
    for path in sockets:
        real = os.path.realpath(path)
        try:
            if not stat.S_ISSOCK(os.lstat(real).st_mode):
                continue
            if not os.path.exists(blank):
                os.close(os.open(blank, os.O_CREAT | os.O_WRONLY, 0o000))
            linux.mount(blank, real, None, linux.MS_BIND)
            covered.append(real)
        except OSError:
            continue  # gone meanwhile, or under a folder that cannot be mounted on
    return covered


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
