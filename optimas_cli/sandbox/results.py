"""What a sandbox run is asked to do (limits, job) and what it reports back (status, output tails)."""
from __future__ import annotations

from dataclasses import dataclass, field

# Per-run statuses, from best to worst. Every run ends in exactly one of them.
PASSED = "passed"  # the program exited 0
FAILED = "failed"  # it exited with a failure code (an uncaught exception, failing tests)
ERROR = "error"  # it could not run at all (syntax error, unloadable code, sandbox setup failure)
TIMEOUT = "timeout"  # wall-clock or CPU-time limit reached; the whole process tree was killed
MEMORY = "memory"  # the memory limit was hit (MemoryError, or an allocator abort)
KILLED = "killed"  # ended by a signal nobody expected (its own kill, a segfault, the OOM killer)
STATUSES = (PASSED, FAILED, ERROR, TIMEOUT, MEMORY, KILLED)

# Exit codes that the prelude and program harnesses use to tell the runner what happened.
EXIT_FAILED = 1
EXIT_ERROR = 2
EXIT_MEMORY = 3
EXIT_SETUP = 125  # the launcher could not start the program (reported on stderr)


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one run. Defaults suit a unit-test run of numpy/pandas-style code."""

    wall_seconds: float = 30.0
    cpu_seconds: float | None = None  # None: same as wall_seconds
    memory_mb: int = 4096  # the whole sandbox (cgroup) and each process (RLIMIT_AS, RLIMIT_DATA)
    max_processes: int = 64  # processes and threads of the sandbox user (RLIMIT_NPROC)
    max_file_mb: int = 256  # largest file it may write (RLIMIT_FSIZE)
    max_open_files: int = 1024
    output_bytes: int = 16_384  # last bytes kept of stdout and of stderr
    network: bool = False  # False: run in an empty network namespace where the platform allows
    drop_privileges: bool = True  # when started as root: run as a fresh unprivileged uid
    scratch_mb: int = 64  # size of each private /tmp, /var/tmp, /dev/shm (when a mount namespace is had)
    work_mb: int = 512  # size of the work directory, all files together (when a mount namespace is had)

    def __post_init__(self) -> None:
        if self.wall_seconds <= 0 or self.memory_mb <= 0 or self.max_processes <= 0:
            raise ValueError(f"sandbox limits must be positive: {self}")

    @property
    def cpu_limit(self) -> float:
        return self.cpu_seconds if self.cpu_seconds is not None else self.wall_seconds


@dataclass(frozen=True)
class SandboxJob:
    """One program to run: its source (main.py), extra files for its directory, extra environment."""

    source: str
    files: dict[str, str | bytes] = field(default_factory=dict)  # relative path -> content
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    env: dict[str, str] = field(default_factory=dict)  # added to the minimal allow-listed environment


@dataclass
class SandboxResult:
    status: str
    returncode: int | None  # the program's exit code, when it exited by itself
    signal: str | None  # the signal that ended it (SIGKILL, SIGXCPU, ...), when one did
    stdout: str  # the last `output_bytes` of each stream
    stderr: str
    duration: float  # wall seconds, launch to cleanup
    cpu_seconds: float | None = None
    isolation: dict = field(default_factory=dict)  # which layers were active, and why any was not
    detail: str = ""  # one line saying why this status was given
    channel: bytes = b""  # the first bytes the program wrote to fd 3, its report channel (apart from stdout)

    @property
    def passed(self) -> bool:
        return self.status == PASSED
