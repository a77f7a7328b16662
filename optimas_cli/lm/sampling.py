"""Seeds for individual samples, shared by the client (API seeds) and the local provider."""
from __future__ import annotations

import hashlib


def sample_seed(seed: int | None, sample_index: int, sample_offset: int = 0) -> int:
    """A stable 63-bit seed for one sample, from (run seed, sample index, position among n samples).

    The local provider gives each sample its own random stream from this seed, so a sample is
    reproducible on its own, whatever else shares its batch.
    """
    digest = hashlib.sha256(f"{seed or 0}:{sample_index}:{sample_offset}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)
