"""Keeping a training step's freed memory from staying in the process (glibc's allocator)."""
from __future__ import annotations

import contextlib
import ctypes
import platform

# glibc's M_MMAP_THRESHOLD option (malloc.h) and the value its dynamic threshold settles at in a process
# that frees large tensors (its DEFAULT_MMAP_THRESHOLD_MAX on 64-bit systems).
M_MMAP_THRESHOLD, GLIBC_DYNAMIC_MMAP_MAX = -3, 32 << 20


@contextlib.contextmanager
def large_allocations_unmapped_on_free(threshold: int = 1 << 20):
    """While the block runs, glibc serves allocations of `threshold` bytes or more with their own pages and
    returns them to the OS when freed (elsewhere: a no-op).

    By default glibc carves tensors under 32 MB (a training step's hidden states) out of its heap, and
    freed memory in the middle of the heap is never returned: one Amazon GRPO step peaked at 6.4 GB RSS
    that way and at 2.1 GB with this (scripts/mem_probe.py grpo). Where memory lives changes no value.
    Used around training only, not process-wide: each large block then costs a system call and fresh pages. GRPO's
    sampling runs inside it on the growing KV cache (lm/local/decode.py `with_growing_cache`), so it does not pay that
    every token; the training pass still pays it (one GRPO step probe: 44 of 93 s in the kernel, docs/results/speed).
    """
    libc = _glibc()
    if libc is None:
        yield
        return
    libc.mallopt(M_MMAP_THRESHOLD, threshold)
    try:
        yield
    finally:  # a fixed threshold ends glibc's adjustment for good: set the value it would have reached
        libc.mallopt(M_MMAP_THRESHOLD, GLIBC_DYNAMIC_MMAP_MAX)
        libc.malloc_trim(0)


def _glibc():
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None
