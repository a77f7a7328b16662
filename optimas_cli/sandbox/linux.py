"""Thin ctypes wrappers over the Linux calls the sandbox launcher needs (Python 3.11 has no os.unshare).

Standard library only: the launcher runs in an interpreter started without site-packages.
Every call raises OSError on failure, so the launcher can record which isolation layer was
refused and carry on without it.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import os
import socket
import struct
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
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
PR_SET_SECCOMP = 22
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_MODE_FILTER = 2

# mount_setattr(2) (Linux 5.12+): one call makes a whole mount tree read-only.
SYS_MOUNT_SETATTR = 442  # the same number on every architecture (the unified syscall table)
AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = -100, 0x8000, 0x1

# (audit arch, unshare, clone, clone3) per machine, for the seccomp filter that denies user namespaces.
_SYSCALLS = {"x86_64": (0xC000003E, 272, 56, 435), "aarch64": (0xC00000B7, 97, 220, 435)}
_X32_SYSCALL_BIT = 0x40000000
_SECCOMP_ALLOW, _SECCOMP_ERRNO = 0x7FFF0000, 0x00050000

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


def set_read_only(path: str, recursive: bool, read_only: bool = True) -> None:
    """Set or clear the read-only flag of the mount at `path` (and, recursive, every mount below it)."""
    attr = (ctypes.c_uint64 * 4)(MOUNT_ATTR_RDONLY if read_only else 0, 0 if read_only else MOUNT_ATTR_RDONLY, 0, 0)
    lib = _lib()
    lib.syscall.restype = ctypes.c_long
    result = lib.syscall(ctypes.c_long(SYS_MOUNT_SETATTR), ctypes.c_int(AT_FDCWD), path.encode(),
                         ctypes.c_uint(AT_RECURSIVE if recursive else 0), attr, ctypes.c_size_t(ctypes.sizeof(attr)))
    _check(0 if result == 0 else -1, f"mount_setattr {path}")


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def deny_user_namespaces() -> None:
    """Install a seccomp filter (needs no_new_privs or root): unshare/clone asking for a new user
    namespace fail with EPERM; clone3, whose flags a filter cannot read, fails with ENOSYS so that
    the C library falls back to clone (as Docker's default profile does); system calls of another
    ABI (x32, 32-bit) fail with EPERM. Everything else is allowed."""
    machine = os.uname().machine
    if machine not in _SYSCALLS:
        raise OSError(95, f"no seccomp filter for {machine}")
    arch, nr_unshare, nr_clone, nr_clone3 = _SYSCALLS[machine]
    ld_abs, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|W|ABS, JMP|JEQ|K, ..., RET|K
    program = [
        (ld_abs, 0, 0, 4),                          # 0: A = arch
        (jeq, 0, 8, arch),                          # 1: foreign ABI -> 10 deny
        (ld_abs, 0, 0, 0),                          # 2: A = syscall number
        (jge, 6, 0, _X32_SYSCALL_BIT),              # 3: x32 -> 10 deny
        (jeq, 6, 0, nr_clone3),                     # 4: clone3 -> 11 ENOSYS
        (jeq, 1, 0, nr_unshare),                    # 5: unshare -> 7 check flags
        (jeq, 0, 2, nr_clone),                      # 6: clone -> 7 check flags, else 9 allow
        (ld_abs, 0, 0, 16),                         # 7: A = low word of the first argument (flags)
        (jset, 1, 0, CLONE_NEWUSER),                # 8: CLONE_NEWUSER -> 10 deny, else 9 allow
        (ret, 0, 0, _SECCOMP_ALLOW),                # 9
        (ret, 0, 0, _SECCOMP_ERRNO | errno.EPERM),  # 10
        (ret, 0, 0, _SECCOMP_ERRNO | errno.ENOSYS), # 11
    ]
    filters = (_SockFilter * len(program))(*[_SockFilter(*ins) for ins in program])
    prog = _SockFprog(len(program), filters)
    lib = _lib()
    _check(lib.prctl(ctypes.c_int(PR_SET_SECCOMP), ctypes.c_ulong(SECCOMP_MODE_FILTER),
                     ctypes.c_void_p(ctypes.addressof(prog)), ctypes.c_ulong(0), ctypes.c_ulong(0)), "seccomp")



def loopback_up() -> None:
    """Bring up `lo` of the current (fresh) network namespace: the program may talk to itself
    over 127.0.0.1 (servers in tests), while the host's own loopback stays out of reach."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))
