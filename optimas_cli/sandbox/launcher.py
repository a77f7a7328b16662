"""The launcher: a short-lived trusted process between the runner and one untrusted program.

Started as `python -S -B -m optimas_cli.sandbox.launcher` in a new session; reads its job spec
(JSON) on stdin and writes one JSON report to the file descriptor the spec names. It
 1. enters new mount, PID, IPC and network namespaces, each tried alone so that a refusal (not root,
    no Linux) only loses that layer, and records which ones took; the new network namespace has
    only its own loopback, brought up so the program can reach itself (never the host);
 2. builds the private filesystem view (mounts.py) when it has a mount namespace, and installs
    the seccomp filter that denies new user namespaces (inherited by everything it starts);
 3. forks a trusted init, PID 1 of the new PID namespace: it mounts a private /proc, forks the
    program and reaps; when it exits the kernel kills whatever is left in the namespace, so a
    process that escaped its process group (setsid, double fork) dies too;
 4. in the program's process: joins the run's cgroup (cgroup.py), closes stdin and every inherited
    descriptor but the report channel (moved to fd 3), sets the resource limits, drops to the unprivileged uid, forbids new privileges (setuid binaries), asks to die
    with its parent, and execs the interpreter;
 5. waits up to the wall-clock limit, kills the init (or, without a PID namespace, the program's
    process group) on timeout, and reports exit code or signal, CPU time and the isolation had.
Standard library only: it runs without site-packages.
"""
from __future__ import annotations

import json
import math
import os
import resource
import select
import signal
import sys
import time

from optimas_cli.sandbox import linux, mounts

EXIT_SETUP = 125  # equal to results.EXIT_SETUP (kept here so the launcher imports nothing else)


def _limit(which: int, value: int) -> None:
    soft, hard = resource.getrlimit(which)
    value = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(which, (value, value))


def _user_threads(uid: int) -> int:
    """How many threads a uid runs now (RLIMIT_NPROC counts threads of the real uid)."""
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/status") as fh:
                    fields = dict(line.split(":", 1) for line in fh if ":" in line)
                if int(fields["Uid"].split()[0]) == uid:
                    count += int(fields["Threads"])
            except (OSError, KeyError, ValueError):
                continue
    return count


CHANNEL_FD = 3  # where the program finds its report channel (results.py says what it is for)


def _exec_program(spec: dict, uid: int | None, cgroup_fds: list[int]) -> None:
    for fd in cgroup_fds:
        os.write(fd, b"0")  # "0": this process; its children are born in the group
    os.chdir(spec["workdir"])
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    if spec["channel_fd"] != CHANNEL_FD:
        os.dup2(spec["channel_fd"], CHANNEL_FD)
    os.set_inheritable(CHANNEL_FD, True)
    os.closerange(CHANNEL_FD + 1, 65536)  # the report pipe, init's pipe, anything the runner leaked
    cpu = math.ceil(spec["cpu_seconds"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))  # SIGXCPU first, SIGKILL a second later
    _limit(resource.RLIMIT_AS, spec["memory_bytes"])
    _limit(resource.RLIMIT_DATA, spec["memory_bytes"])
    _limit(resource.RLIMIT_FSIZE, spec["max_file_bytes"])
    _limit(resource.RLIMIT_NOFILE, spec["max_open_files"])
    _limit(resource.RLIMIT_CORE, 0)
    if uid is not None:
        _limit(resource.RLIMIT_NPROC, spec["max_processes"])  # a fresh uid: the count starts at zero
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    elif os.getuid() != 0 and sys.platform.startswith("linux"):
        # Same user as the runner: the limit counts its other processes too, so allow for them.
        _limit(resource.RLIMIT_NPROC, _user_threads(os.getuid()) + spec["max_processes"])
    if sys.platform.startswith("linux"):
        linux.prctl(linux.PR_SET_NO_NEW_PRIVS, 1)
        linux.prctl(linux.PR_SET_PDEATHSIG, signal.SIGKILL)  # after setresuid, which clears it
    os.execve(spec["argv"][0], spec["argv"], spec["env"])


def _init(spec: dict, uid: int | None, status_fd: int, own_proc: bool, cgroup_fds: list[int]) -> None:
    """PID 1 of the sandbox's PID namespace: run the program, reap orphans, report its status."""
    linux.prctl(linux.PR_SET_PDEATHSIG, signal.SIGKILL)  # the launcher killed: the namespace dies
    # A session of its own: kill(0) from the program (whose parent pid reads 0 here) then reaches
    # only this namespace's group, never the launcher's.
    os.setsid()
    if own_proc:
        try:
            mounts.private_proc()
        except OSError:
            pass  # the host's /proc stays, but its pids are not signalable from this namespace
    program = os.fork()
    if program == 0:
        _run_or_report(lambda: _exec_program(spec, uid, cgroup_fds))
    while True:
        pid, status, usage = os.wait4(-1, 0)
        if pid == program:
            break
    os.write(status_fd, json.dumps({"status": status, "cpu": usage.ru_utime + usage.ru_stime}).encode())
    os._exit(0)


def _own_group_then_exec(spec: dict, uid: int | None, cgroup_fds: list[int]) -> None:
    os.setpgid(0, 0)  # without a PID namespace: its own group, so a timeout kills its children too
    _exec_program(spec, uid, cgroup_fds)


def _run_or_report(step) -> None:
    try:
        step()
    except BaseException as exc:  # noqa: BLE001 - whatever broke, say so and leave
        os.write(2, f"sandbox setup failed: {type(exc).__name__}: {exc}\n".encode())
    os._exit(EXIT_SETUP)


def _wait(pid: int, seconds: float) -> bool:
    """True when `pid` exits within `seconds` (it is not reaped here)."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
            time.sleep(0.01)
        return False
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(seconds * 1000))
    finally:
        os.close(fd)


def _isolate(spec: dict) -> tuple[dict, int | None]:
    """Enter the namespaces and build the filesystem view; return (isolation, uid to run as)."""
    iso: dict = {"network": False, "pid": False, "ipc": False, "mount": False, "user": False, "userns_denied": False,
                 "memory": spec["memory_scope"], "notes": list(spec["notes"])}
    sockets = mounts.host_unix_sockets()  # listed while still in the host's network namespace
    layers = {"mount": linux.CLONE_NEWNS, "pid": linux.CLONE_NEWPID, "ipc": linux.CLONE_NEWIPC}
    if spec["isolate_network"]:
        layers["network"] = linux.CLONE_NEWNET
    else:
        iso["notes"].append("network: allowed by the limits")
    for name, flag in layers.items():
        try:
            linux.unshare(flag)
            iso[name] = True
        except OSError as exc:
            iso["notes"].append(f"{name}: namespace refused ({exc.strerror})")
    if iso["network"]:
        try:
            linux.loopback_up()
        except OSError as exc:
            iso["notes"].append(f"network: private loopback stays down ({exc.strerror})")
    uid = spec["uid"]
    if iso["mount"]:
        try:
            iso["covered"] = mounts.private_filesystem(
                spec["workdir"], spec["needed"], hide_unreachable=uid is not None, scratch_mb=spec["scratch_mb"],
                work_mb=spec["work_mb"], owner=uid, sockets=sockets,
            )
        except OSError as exc:
            iso["notes"].append(f"filesystem: private view failed ({exc})")
            iso["mount"] = False
    if uid is not None and not iso["mount"]:
        hidden = [h for h in map(mounts.first_hidden_ancestor, spec["needed"]) if h]
        if hidden:
            iso["notes"].append(f"user: kept the runner's uid, the interpreter is under {hidden[0]} (mode 0700)")
            uid = None
    if uid is not None:
        iso["user"] = True
        iso["uid"] = uid
    elif spec["uid"] is None:
        iso["notes"].append("user: runs as the runner's user (not root, or drop_privileges is off)")
    try:
        linux.deny_user_namespaces()
        iso["userns_denied"] = True
    except OSError as exc:
        iso["notes"].append(f"user namespaces: not denied ({exc.strerror or exc})")
    return iso, uid


def main() -> None:
    spec = json.loads(sys.stdin.read())
    report_fd = spec["report_fd"]
    # Opened before the root becomes read-only: the program joins its cgroup through these.
    cgroup_fds = [os.open(path, os.O_WRONLY) for path in spec["cgroup_procs"]]
    iso, uid = _isolate(spec)
    status_r, status_w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(status_r)
        os.close(report_fd)
        if iso["pid"]:
            _run_or_report(lambda: _init(spec, uid, status_w, own_proc=iso["mount"], cgroup_fds=cgroup_fds))
        _run_or_report(lambda: _own_group_then_exec(spec, uid, cgroup_fds))
    os.close(status_w)
    os.close(spec["channel_fd"])  # only the program's tree holds the channel: its end is the channel's EOF
    for fd in cgroup_fds:
        os.close(fd)
    timed_out = not _wait(child, spec["wall_seconds"])
    if timed_out:
        for kill in (os.kill, os.killpg):  # the init takes its namespace down; else the program's group
            try:
                kill(child, signal.SIGKILL)
            except OSError:
                pass
    _, status, usage = os.wait4(child, 0)
    cpu = usage.ru_utime + usage.ru_stime
    if iso["pid"]:
        data = b"".join(iter(lambda: os.read(status_r, 65536), b""))
        status = None
        if data:
            info = json.loads(data)
            status, cpu = info["status"], info["cpu"]
    report = {"isolation": iso, "timed_out": timed_out, "cpu_seconds": round(cpu, 3),
              "exit_code": None, "signal": None}
    if status is not None and not timed_out:
        if os.WIFEXITED(status):
            report["exit_code"] = os.WEXITSTATUS(status)
        elif os.WIFSIGNALED(status):
            report["signal"] = os.WTERMSIG(status)
    elif status is None and not timed_out:
        report["exit_code"] = EXIT_SETUP  # the init died without a word
    os.write(report_fd, json.dumps(report).encode())
    os.close(report_fd)


if __name__ == "__main__":
    main()
