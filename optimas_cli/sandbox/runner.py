"""Run one untrusted Python program in the sandbox and say how it ended (never exec'd in our process).

The runner makes a fresh work directory, starts the launcher (launcher.py) in a new session with
the job spec on its stdin, drains the program's stdout and stderr keeping only their tails,
enforces a backstop deadline in case the launcher itself hangs, then kills every straggler,
removes the directory and classifies the outcome.
"""
from __future__ import annotations

import functools
import json
import os
import random
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from optimas_cli.sandbox import cgroup, cleanup
from optimas_cli.sandbox.results import (
    ERROR,
    EXIT_ERROR,
    EXIT_MEMORY,
    EXIT_SETUP,
    FAILED,
    KILLED,
    MEMORY,
    PASSED,
    TIMEOUT,
    SandboxJob,
    SandboxLimits,
    SandboxResult,
)

PRELUDE = Path(__file__).with_name("prelude.py")
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the folder holding optimas_cli/
# Sandbox users are fresh uids drawn from a range no real account uses, one per run, so that the
# process limit counts only that run's processes and stragglers can be found and killed by uid.
UID_BASE, UID_SPAN = 3_000_000, 1 << 24
BACKSTOP_SECONDS = 15.0  # extra time before the runner kills a launcher that did not report
DRAIN_AFTER_EXIT = 1.0  # how long to keep reading pipes that a straggler still holds open
CHANNEL_BYTES = 1 << 20  # the first bytes kept of the report channel (fd 3)

_MEMORY_HINTS = ("MemoryError", "bad_alloc", "Cannot allocate memory", "out of memory")


class _Tail:
    """Keeps the last `limit` bytes of a stream and counts what was dropped."""

    def __init__(self, limit: int):
        self.limit, self.buf, self.dropped = limit, bytearray(), 0

    def add(self, chunk: bytes) -> None:
        self.buf += chunk
        if len(self.buf) > self.limit:
            cut = len(self.buf) - self.limit
            self.dropped += cut
            del self.buf[:cut]

    def text(self) -> str:
        body = self.buf.decode("utf-8", errors="replace")
        return f"[... {self.dropped} earlier bytes dropped ...]\n{body}" if self.dropped else body


class _Head:
    """Keeps the first `limit` bytes of a stream: what a program reports first is never pushed out."""

    def __init__(self, limit: int):
        self.limit, self.buf = limit, bytearray()

    def add(self, chunk: bytes) -> None:
        self.buf += chunk[: max(0, self.limit - len(self.buf))]


def _needed_paths() -> list[str]:
    """What the sandboxed interpreter must be able to read: itself, its stdlib, its packages."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             os.path.realpath(sys.executable), str(PRELUDE.parent)}
    paths.update(p for p in sys.path if p and os.path.isabs(p) and os.path.exists(p))
    real = sorted({os.path.realpath(p) for p in paths})
    # A path inside another needed path comes along with it.
    return [p for p in real if not any(o != p and p.startswith(o.rstrip("/") + "/") for o in real)]


def sandbox_env(workdir: str, extra: dict[str, str]) -> dict[str, str]:
    """The program's whole environment: an allow-list, nothing inherited (no keys, no tokens)."""
    env = {
        "PATH": f"{os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "USER": "sandbox",
        "LOGNAME": "sandbox",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TZ": "UTC",  # as the official BigCodeBench harness: date tests assume UTC
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "PYTHONIOENCODING": "utf-8",
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": os.path.join(workdir, ".config", "matplotlib"),
        # One thread per numeric library: parallel runs share the cores, and threads count as processes.
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "NUMEXPR_NUM_THREADS": "1",
    }
    env.update(extra)
    return env


def _write_files(workdir: str, job: SandboxJob) -> None:
    Path(workdir, "main.py").write_text(job.source, encoding="utf-8")
    for rel, content in job.files.items():
        target = Path(workdir, rel).resolve()
        if not str(target).startswith(workdir + os.sep):
            raise ValueError(f"sandbox file {rel!r} would land outside the work directory")
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content, encoding="utf-8")


def _chown_tree(root: str, uid: int) -> None:
    os.chown(root, uid, uid)
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            os.chown(os.path.join(folder, name), uid, uid, follow_symlinks=False)


def _spec(job: SandboxJob, workdir: str, uid: int | None, report_fd: int, channel_fd: int,
          group: cgroup.Group | None, no_group: str) -> dict:
    lim = job.limits
    memory_bytes, processes = lim.memory_mb << 20, lim.max_processes
    if group is not None:
        scope, notes = f"cgroup {group.kind}", []
    else:
        processes, memory_bytes = cgroup.fallback_split(memory_bytes, processes)
        scope = "per-process split"
        notes = [f"memory: {no_group}; each of at most {processes} processes gets {memory_bytes >> 20} MB"]
    return {
        "workdir": workdir,
        "argv": [sys.executable, "-B", "-s", str(PRELUDE), "main.py"],
        "env": sandbox_env(workdir, job.env),
        "wall_seconds": lim.wall_seconds,
        "cpu_seconds": lim.cpu_limit,
        "memory_bytes": memory_bytes,
        "max_processes": processes,
        "memory_scope": scope,
        "notes": notes,
        "cgroup_procs": group.procs_files if group is not None else [],
        "channel_fd": channel_fd,
        "max_file_bytes": lim.max_file_mb << 20,
        "max_open_files": lim.max_open_files,
        "scratch_mb": lim.scratch_mb,
        "work_mb": lim.work_mb,
        "isolate_network": not lim.network,
        "uid": uid,
        "needed": _needed_paths(),
        "report_fd": report_fd,
    }


def classify(report: dict | None, backstop: bool, stderr_tail: str, cpu_limit: float) -> tuple[str, str]:
    """(status, why) from the launcher's report; pure, so every branch is testable."""
    if report is None:
        if backstop:
            return TIMEOUT, "the launcher did not finish in time and was killed"
        return ERROR, "the launcher ended without a report (see stderr)"
    if report["timed_out"]:
        return TIMEOUT, "wall-clock limit reached; its process tree was killed"
    sig, code = report.get("signal"), report.get("exit_code")
    if report.get("oom_kills") and code != EXIT_SETUP:
        return MEMORY, f"the sandbox's memory limit (all its processes together) was reached: {report['oom_kills']} killed"
    if sig is not None:
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        cpu = report.get("cpu_seconds") or 0.0
        if name == "SIGXCPU" or (name == "SIGKILL" and cpu >= cpu_limit):
            return TIMEOUT, "CPU-time limit reached"
        if name in ("SIGABRT", "SIGSEGV", "SIGBUS") and any(h in stderr_tail for h in _MEMORY_HINTS):
            return MEMORY, f"ended by {name} after failing to allocate memory"
        if name == "SIGXFSZ":
            return KILLED, "wrote a file larger than the file-size limit"
        return KILLED, f"ended by {name}"
    if code == 0:
        return PASSED, "exited 0"
    if code == EXIT_MEMORY:
        return MEMORY, "memory limit reached (MemoryError)"
    if code == EXIT_SETUP:
        return ERROR, "the sandbox could not start the program"
    if code == EXIT_ERROR:
        return ERROR, "the program could not run (syntax error or unloadable code)"
    return FAILED, f"exited {code}"


def _drain(proc: subprocess.Popen, streams: dict, deadline: float) -> bool:
    """Read the pipes (file object -> buffer) until EOF; return True if the backstop deadline forced a kill."""
    sel = selectors.DefaultSelector()
    for stream, buffer in streams.items():
        sel.register(stream, selectors.EVENT_READ, buffer)
    backstop, exited_at = False, None
    while sel.get_map():
        now = time.monotonic()
        if exited_at is None and proc.poll() is not None:
            exited_at = now
        if exited_at is not None and now - exited_at > DRAIN_AFTER_EXIT:
            break  # a straggler holds the pipes open; cleanup kills it
        if exited_at is None and now > deadline:
            backstop = True
            _killpg(proc.pid)
            exited_at = now
        for key, _ in sel.select(timeout=0.1):
            chunk = os.read(key.fd, 65536)
            if chunk:
                key.data.add(chunk)
            else:
                sel.unregister(key.fileobj)
    sel.close()
    proc.wait()
    return backstop


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass


def run_job(job: SandboxJob) -> SandboxResult:
    """Run one job to completion; never raises for anything the program does."""
    start = time.monotonic()
    # No dash in the name: some BigCodeBench tasks split their temporary paths on "-".
    workdir = os.path.realpath(tempfile.mkdtemp(prefix="optimas_sandbox_"))
    uid = None
    if job.limits.drop_privileges and hasattr(os, "geteuid") and os.geteuid() == 0:
        uid = UID_BASE + random.SystemRandom().randrange(UID_SPAN)
    report_r, report_w = os.pipe()
    channel_r, channel_w = os.pipe()
    out, err, channel = _Tail(job.limits.output_bytes), _Tail(job.limits.output_bytes), _Head(CHANNEL_BYTES)
    report, backstop, proc, group = None, False, None, None
    try:
        _write_files(workdir, job)
        if uid is not None:
            _chown_tree(workdir, uid)
        group, no_group = cgroup.create(os.path.basename(workdir), job.limits.memory_mb << 20, job.limits.max_processes)
        proc = subprocess.Popen(
            [sys.executable, "-S", "-B", "-m", "optimas_cli.sandbox.launcher"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            pass_fds=(report_w, channel_w), start_new_session=True, cwd=workdir,
            env={"PYTHONPATH": PACKAGE_ROOT, "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"},
        )
        spec = _spec(job, workdir, uid, report_w, channel_w, group, no_group)  # pass_fds keeps the numbers
        for fd in (report_w, channel_w):
            os.close(fd)
        report_w = channel_w = -1
        try:
            proc.stdin.write(json.dumps(spec).encode())
            proc.stdin.close()
        except BrokenPipeError:
            pass  # the launcher died at start; its stderr says why
        with os.fdopen(channel_r, "rb", buffering=0, closefd=False) as channel_file:
            streams = {proc.stdout: out, proc.stderr: err, channel_file: channel}
            backstop = _drain(proc, streams, start + job.limits.wall_seconds + BACKSTOP_SECONDS)
        data = b"".join(iter(lambda: os.read(report_r, 65536), b""))
        report = json.loads(data) if data else None
    finally:
        if proc is not None:
            _killpg(proc.pid)
        for fd in (report_w, channel_w, report_r, channel_r):
            if fd != -1:
                os.close(fd)
        if group is not None:
            if report is not None:
                report["oom_kills"] = cgroup.oom_kills(group)
            cgroup.remove(group)
        isolation = report["isolation"] if report else {}
        if uid is not None:
            cleanup.kill_user_processes(uid)
            if not isolation.get("mount"):
                cleanup.remove_user_files(uid)
        shutil.rmtree(workdir, ignore_errors=True)
    status, detail = classify(report, backstop, err.text(), job.limits.cpu_limit)
    return SandboxResult(
        status=status,
        returncode=report.get("exit_code") if report else None,
        signal=_signal_name(report.get("signal")) if report else None,
        stdout=out.text(),
        stderr=err.text(),
        channel=bytes(channel.buf),
        duration=round(time.monotonic() - start, 3),
        cpu_seconds=report.get("cpu_seconds") if report else None,
        isolation=isolation,
        detail=detail,
    )


def _signal_name(sig: int | None) -> str | None:
    if sig is None:
        return None
    try:
        return signal.Signals(sig).name
    except ValueError:
        return str(sig)


def run_python(source: str, *, files: dict | None = None, limits: SandboxLimits | None = None,
               env: dict[str, str] | None = None) -> SandboxResult:
    """Run `source` as main.py in a fresh sandbox."""
    return run_job(SandboxJob(source=source, files=dict(files or {}), limits=limits or SandboxLimits(),
                              env=dict(env or {})))


@functools.cache
def probe_isolation() -> dict:
    """The isolation a run gets on this machine (network, pid, mount, user, notes), measured once."""
    return run_python("pass", limits=SandboxLimits(wall_seconds=30, memory_mb=512)).isolation
