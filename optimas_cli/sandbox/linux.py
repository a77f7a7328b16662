"""Thin ctypes wrappers over the Linux calls the sandbox launcher needs (Python 3.11 has no os.unshare).

Standard library only: the launcher runs in an interpreter started without site-packages.
Every call raises OSError on failure, so the launcher can record which isolation layer was
refused and carry on without it.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import os
import socket
import struct
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18

SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1

PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38

_libc = None


def _lib():
    global _libc
    if _libc is None:
        if not sys.platform.startswith("linux"):
            raise OSError(38, "not Linux: namespaces and mounts are unavailable")
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    return _libc


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def unshare(flags: int) -> None:
    _check(_lib().unshare(ctypes.c_int(flags)), "unshare")


def _bytes(text: str | None) -> bytes | None:
    return text.encode() if text is not None else None


def mount(source: str | None, target: str, fstype: str | None, flags: int = 0, data: str | None = None) -> None:
    enc = _bytes
    _check(
        _lib().mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
        f"mount {target}",
    )


def prctl(option: int, arg: int) -> None:
    _check(_lib().prctl(ctypes.c_int(option), ctypes.c_ulong(arg), ctypes.c_ulong(0),
                        ctypes.c_ulong(0), ctypes.c_ulong(0)), "prctl")



def loopback_up() -> None:
    """Bring up `lo` of the current (fresh) network namespace: the program may talk to itself
    over 127.0.0.1 (servers in tests), while the host's own loopback stays out of reach."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))
