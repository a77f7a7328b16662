"""Run model-written code in a separate, limited, isolated process (see README.md in this folder).

    from optimas_cli.sandbox import SandboxLimits, run_python, run_many
    result = run_python("print(1 + 1)", limits=SandboxLimits(wall_seconds=5))
    result.status  # "passed" | "failed" | "error" | "timeout" | "memory" | "killed"

Standard library only, so the launcher can import this package without site-packages.
"""
from optimas_cli.sandbox.pool import default_workers, run_many
from optimas_cli.sandbox.results import (
    ERROR,
    FAILED,
    KILLED,
    MEMORY,
    PASSED,
    STATUSES,
    TIMEOUT,
    SandboxJob,
    SandboxLimits,
    SandboxResult,
)
from optimas_cli.sandbox.runner import probe_isolation, run_job, run_python

__all__ = [
    "ERROR", "FAILED", "KILLED", "MEMORY", "PASSED", "STATUSES", "TIMEOUT", "SandboxJob", "SandboxLimits",
    "SandboxResult", "default_workers", "probe_isolation", "run_job", "run_many", "run_python",
]
