"""Run folders packed into one archive: `<name>.runs.tar.xz` is the folder `<name>` beside it, tarred
(`tar -cJf runs.runs.tar.xz runs`), and reads as that folder (issue 58: committed results in proportion, every
run still reportable).

`optimas report docs/results/x/runs` (or the archive's own path) reads `docs/results/x/runs.runs.tar.xz` when no
folder `runs` is there, and names its runs `docs/results/x/runs/<run>`, where `tar -xJf` beside the archive puts
them: a report of the archive is the report of the folder, path for path. The archive is unpacked once per process
into a private temporary folder, through tarfile's data filter; a member outside `<name>/` (an absolute path, `..`,
a link out) is refused in one line and nothing of the archive is read.
"""
from __future__ import annotations

import lzma
import os
import sys
import tarfile
import tempfile
from pathlib import Path, PurePosixPath

from optimas_cli.errors import UserError

SUFFIX = ".runs.tar.xz"
PRESET = 9 | lzma.PRESET_EXTREME
_UNPACKED: dict[tuple, tempfile.TemporaryDirectory] = {}  # (archive, mtime, size) -> its copy, removed at exit


def archive_of(folder: Path) -> Path:
    """The archive that holds `folder` when it is packed."""
    return folder.with_name(folder.name + SUFFIX)


def folder_of(archive: Path) -> Path:
    """The folder an archive holds (and reads as)."""
    return archive.with_name(archive.name[: -len(SUFFIX)])


def is_archive(path: Path) -> bool:
    return path.name.endswith(SUFFIX) and len(path.name) > len(SUFFIX) and path.is_file()


def located(path: Path) -> Path:
    """Where the files of `path` lie: `path` itself, or, when `path` is a packed folder or inside one (no such
    folder on disk, its archive beside it), its place in the archive's unpacked copy."""
    for ancestor in (path, *path.parents):
        if ancestor.exists() or not ancestor.name:
            return path  # on disk, or nothing packed holds it: the caller names the missing path
        if is_archive(archive_of(ancestor)):
            return unpacked(archive_of(ancestor)) / path.relative_to(ancestor)
    return path


def unpacked(archive: Path) -> Path:
    """The folder `archive` holds, unpacked on first use (and again if the archive changes)."""
    stat = archive.stat()
    key = (str(archive.resolve()), stat.st_mtime_ns, stat.st_size)
    if key not in _UNPACKED:
        if not hasattr(tarfile, "data_filter"):  # the filter came in Python 3.11.4; unfiltered is not safe
            raise UserError(f"{archive} cannot be unpacked safely by Python {sys.version.split()[0]}",
                            "use Python 3.11.4 or later, or unpack it by hand beside itself: tar -xJf <archive>")
        copy = tempfile.TemporaryDirectory(prefix="optimas-runs-")
        try:
            _extract(archive, Path(copy.name))
        except BaseException:
            copy.cleanup()
            raise
        _UNPACKED[key] = copy
    return Path(_UNPACKED[key].name) / folder_of(archive).name


def _extract(archive: Path, into: Path) -> None:
    top = folder_of(archive).name
    repack = f"pack the folder again: tar -cJf {archive.name} {top} (beside it)"
    try:
        with tarfile.open(archive, "r:xz") as tar:
            members = tar.getmembers()
            stray = next((m for m in members if _outside(m.name, top)), None)
            if stray is None:
                tar.extractall(into, members=members, filter="data")
    except tarfile.FilterError as exc:  # a link or a name the filter finds pointing out of `into`
        stray = exc.tarinfo
    except (tarfile.TarError, lzma.LZMAError, EOFError, OSError) as exc:
        raise UserError(f"{archive} is damaged ({exc})", f"restore it, or {repack}") from None
    if stray is not None:
        raise UserError(f"{archive} holds {stray.name!r}, which points outside the folder {top}/ it packs; "
                        "nothing of it was read", repack)
    (into / top).mkdir(exist_ok=True)  # an archive of an empty folder


def _outside(name: str, top: str) -> bool:
    parts = PurePosixPath(name).parts
    return not parts or parts[0] != top or ".." in parts


def pack(folder: Path) -> Path:
    """`folder`'s files as `<folder>.runs.tar.xz`, named `<folder name>/...` (xz -9e; members sorted, owners
    dropped, modes and times kept). The folder stays: the caller checks the archive, then removes it."""
    archive = archive_of(folder)
    partial = archive.with_name(archive.name + ".tmp")

    def anonymous(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    with tarfile.open(partial, "w:xz", preset=PRESET) as tar:
        for root, dirs, files in os.walk(folder):
            dirs.sort()
            for name in sorted(files):
                path = Path(root, name)
                arcname = f"{folder.name}/{path.relative_to(folder).as_posix()}"
                tar.add(path, arcname=arcname, recursive=False, filter=anonymous)
    partial.replace(archive)
    return archive
