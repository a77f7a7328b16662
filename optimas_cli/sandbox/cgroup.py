"""One control group per run: memory and process count bounded for the sandbox as a whole.

RLIMIT_AS bounds each process alone, so N processes may hold N times the limit; a memory cgroup
bounds their sum (page cache and the private tmpfs mounts' files included), and the kernel's OOM
killer acts inside the group only. The runner (root) creates the group under its own cgroup,
the program's first process joins it (through a descriptor the launcher opens before the root
is made read-only), every process it starts inherits it, and the runner reads the OOM count and
removes the group afterwards. Both hierarchies are handled: cgroup v2 (memory.max, pids.max,
memory.events) and v1 (memory.limit_in_bytes, memory.memsw.limit_in_bytes, pids.max,
memory.oom_control). Where neither is writable (not root, a v2 parent with processes in it), the
runner falls back to a per-process split (see `fallback_split`) and says so in the isolation notes.
Standard library only: the launcher imports it without site-packages.
"""
from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field

ROOT = "/sys/fs/cgroup"
FALLBACK_PROCESS_MB = 512  # the smallest per-process share the fallback gives (an interpreter with numpy fits)


@dataclass
class Group:
    kind: str  # "v2" | "v1"
    dirs: list[str] = field(default_factory=list)  # every directory made for this run (v1: one per controller)
    memory_dir: str = ""

    @property
    def procs_files(self) -> list[str]:
        return [os.path.join(d, "cgroup.procs") for d in self.dirs]


def _own_paths() -> dict[str, str]:
    """controller (or "" for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    paths = {}
    with open("/proc/self/cgroup") as fh:
        for line in fh:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                paths[name] = path
    return paths


def _write(path: str, value: str) -> None:
    with open(path, "w") as fh:
        fh.write(value)


def _v2_parent(own: dict[str, str]) -> str | None:
    for base in (ROOT, os.path.join(ROOT, "unified")):
        controllers = os.path.join(base, "cgroup.controllers")
        if "" in own and os.path.exists(controllers):
            parent = os.path.join(base, own[""].lstrip("/"))
            with open(os.path.join(parent, "cgroup.controllers")) as fh:
                if "memory" in fh.read().split():
                    return parent
    return None


def create(name: str, memory_bytes: int, max_processes: int) -> tuple[Group | None, str]:
    """Make and limit a group for one run: (group, "") or (None, why not)."""
    try:
        own = _own_paths()
    except OSError as exc:
        return None, f"no /proc/self/cgroup ({exc.strerror})"
    try:
        parent = _v2_parent(own)
        if parent is not None:
            group = Group("v2", [os.path.join(parent, name)])
            group.memory_dir = group.dirs[0]
            os.mkdir(group.memory_dir)
            try:
                with open(os.path.join(parent, "cgroup.subtree_control")) as fh:
                    enabled = fh.read().split()
                if "memory" not in enabled:
                    _write(os.path.join(parent, "cgroup.subtree_control"), "+memory +pids")
                _write(os.path.join(group.memory_dir, "memory.max"), str(memory_bytes))
                for knob, value in (("memory.swap.max", "0"), ("pids.max", str(max_processes))):
                    if os.path.exists(os.path.join(group.memory_dir, knob)):
                        _write(os.path.join(group.memory_dir, knob), value)
            except OSError:
                remove(group)
                raise
            return group, ""
        if "memory" in own and os.path.isdir(os.path.join(ROOT, "memory")):
            group = Group("v1")
            group.memory_dir = os.path.join(ROOT, "memory", own["memory"].lstrip("/"), name)
            os.mkdir(group.memory_dir)
            group.dirs.append(group.memory_dir)
            try:
                _write(os.path.join(group.memory_dir, "memory.limit_in_bytes"), str(memory_bytes))
                swap = os.path.join(group.memory_dir, "memory.memsw.limit_in_bytes")
                if os.path.exists(swap):
                    _write(swap, str(memory_bytes))  # memory + swap: swapping out does not escape the bound
                if "pids" in own and os.path.isdir(os.path.join(ROOT, "pids")):
                    pids_dir = os.path.join(ROOT, "pids", own["pids"].lstrip("/"), name)
                    os.mkdir(pids_dir)
                    group.dirs.append(pids_dir)
                    _write(os.path.join(pids_dir, "pids.max"), str(max_processes))
            except OSError:
                remove(group)
                raise
            return group, ""
    except OSError as exc:
        return None, f"cannot make a memory cgroup ({exc.strerror or exc})"
    return None, "no memory cgroup controller is mounted"


def fallback_split(memory_bytes: int, max_processes: int) -> tuple[int, int]:
    """(processes, bytes per process) with processes x bytes <= memory_bytes, for runs without a
    cgroup: the total stays bounded by giving each process (thread, as RLIMIT_NPROC counts them)
    an equal share, at least FALLBACK_PROCESS_MB, so fewer processes are allowed."""
    processes = max(1, min(max_processes, memory_bytes // (FALLBACK_PROCESS_MB << 20)))
    return processes, memory_bytes // processes


def oom_kills(group: Group) -> int:
    """How many processes the kernel killed in this group for want of memory."""
    name = "memory.events" if group.kind == "v2" else "memory.oom_control"
    try:
        with open(os.path.join(group.memory_dir, name)) as fh:
            fields = dict(line.split() for line in fh if len(line.split()) == 2)
        return int(fields.get("oom_kill", 0))
    except (OSError, ValueError):
        return 0


def _members(folder: str) -> list[int]:
    try:
        with open(os.path.join(folder, "cgroup.procs")) as fh:
            return [int(p) for p in fh.read().split()]
    except (OSError, ValueError):
        return []


def remove(group: Group, seconds: float = 2.0) -> None:
    """Kill whatever is left in the group and remove its directories (a group empties as its
    killed processes are reaped, so the removal is retried for a moment)."""
    deadline = time.monotonic() + seconds
    for folder in reversed(group.dirs):
        while True:
            for pid in _members(folder):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            try:
                os.rmdir(folder)
                break
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.02)
