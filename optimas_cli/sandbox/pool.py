"""Many sandbox runs at once: each is its own process tree, so threads only wait on them."""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from optimas_cli.sandbox.results import SandboxJob, SandboxResult
from optimas_cli.sandbox.runner import run_job


def default_workers() -> int:
    """One run per core this process may use: the programs are CPU-bound."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def run_many(
    jobs: Sequence[SandboxJob],
    workers: int | None = None,
    on_done: Callable[[int, SandboxResult], None] | None = None,
) -> list[SandboxResult]:
    """Run every job, at most `workers` at a time (default: the core count); results in job order."""
    jobs = list(jobs)
    if not jobs:
        return []
    results: list[SandboxResult | None] = [None] * len(jobs)
    with ThreadPoolExecutor(max_workers=min(workers or default_workers(), len(jobs))) as pool:
        futures = {pool.submit(run_job, job): i for i, job in enumerate(jobs)}
        for future in futures:  # in submission order; each waits for its own run
            i = futures[future]
            results[i] = future.result()
            if on_done is not None:
                on_done(i, results[i])
    return results  # type: ignore[return-value]
