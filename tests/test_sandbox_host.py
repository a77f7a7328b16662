"""Hostile programs must leave nothing on the host: IPC objects, files in world-writable folders,
memory beyond the sandbox's total, user namespaces (issue 18, items 1-3 and 6), host Unix sockets
and a disk filled with many small files (issue 26, items 4 and 6)."""
from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from optimas_cli.sandbox import MEMORY, PASSED, SandboxLimits, cgroup, probe_isolation, run_python
from optimas_cli.sandbox.runner import classify

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox targets Linux")

FAST = SandboxLimits(wall_seconds=10, memory_mb=768, max_processes=24)


def needs(*layers: str):
    iso = probe_isolation()
    missing = [layer for layer in layers if not iso.get(layer)]
    if missing:
        pytest.skip(f"sandbox isolation {missing} unavailable here: {iso.get('notes')}")


def host_shm_keys() -> set[int]:
    with open("/proc/sysvipc/shm") as fh:
        next(fh)
        return {int(line.split()[0]) for line in fh if line.strip()}


def test_system_v_shared_memory_does_not_outlive_the_run():
    needs("ipc")
    key = secrets.randbelow(1 << 30) + 1
    source = (
        "import ctypes\n"
        "libc = ctypes.CDLL('libc.so.6', use_errno=True)\n"
        f"shmid = libc.shmget({key}, 1 << 20, 0o1666)\n"  # IPC_CREAT | 0666
        "assert shmid >= 0, ctypes.get_errno()\n"
        "print('created', shmid)\n"
    )
    result = run_python(source, limits=FAST)
    assert result.status == PASSED and "created" in result.stdout, result.stderr
    assert key not in host_shm_keys(), "the segment survived on the host"


def world_writable_dirs() -> list[str]:
    """Every world-writable folder of the root filesystem, found as an attacker would."""
    found = subprocess.run(["find", "/", "-xdev", "-type", "d", "-perm", "-0002"],
                           capture_output=True, text=True, timeout=120).stdout.split()
    return [d for d in found if not d.startswith("/proc")]


def test_no_world_writable_host_folder_keeps_a_file_written_inside():
    needs("mount", "user")
    folders = world_writable_dirs() + ["/run/lock", "/var/lock", "/dev/mqueue"]
    folders = sorted({os.path.realpath(d) for d in folders if os.path.isdir(d)})
    name = f"optimas-probe-{secrets.token_hex(4)}"
    source = (
        "import os\n"
        f"for d in {folders!r}:\n"
        "    try:\n"
        f"        open(os.path.join(d, {name!r}), 'w').write('x')\n"
        "        print('wrote', d)\n"
        "    except OSError as exc:\n"
        "        print('refused', d, exc.errno)\n"
    )
    result = run_python(source, limits=FAST)
    assert result.status == PASSED, result.stderr
    left = [d for d in folders if os.path.exists(os.path.join(d, name))]
    for d in left:
        os.unlink(os.path.join(d, name))
    assert left == [], f"files persisted on the host in {left} (sandbox said: {result.stdout})"


FOUR_CHILDREN_OF_400_MB = (
    "import os, sys, time\n"
    "r, w = os.pipe()\n"
    "kids = []\n"
    "for i in range(4):\n"
    "    try:\n"
    "        pid = os.fork()\n"
    "    except OSError as exc:\n"
    "        print('fork refused', exc.errno, file=sys.stderr)\n"
    "        continue\n"
    "    if pid == 0:\n"
    "        os.close(r)\n"
    "        block = bytearray(400 << 20)\n"
    "        for j in range(0, len(block), 4096):\n"
    "            block[j] = 1\n"
    "        os.write(w, b'h')\n"
    "        time.sleep(3)\n"
    "        os._exit(0)\n"
    "    kids.append(pid)\n"
    "os.close(w)\n"
    "codes = [os.waitpid(pid, 0)[1] for pid in kids]\n"
    "held = len(b''.join(iter(lambda: os.read(r, 16), b'')))\n"
    "print('held', held, 'codes', codes)\n"
)
HALF_GB = SandboxLimits(wall_seconds=30, memory_mb=512, max_processes=24)


def held(result) -> int:
    return int(result.stdout.split()[1]) if result.stdout.startswith("held") else 0


def test_memory_is_bounded_for_the_whole_sandbox_not_per_process():
    # Four children of 400 MB each under a 512 MB limit: together 1.6 GB, which must not all be held.
    result = run_python(FOUR_CHILDREN_OF_400_MB, limits=HALF_GB)
    assert held(result) < 4, f"all four 400 MB children held their memory under 512 MB: {result.stdout}"
    assert result.status in (MEMORY, PASSED), (result.status, result.detail, result.stderr[-500:])
    if result.isolation.get("memory") == "cgroup":
        assert result.status == MEMORY, result.detail  # the OOM kill inside the group is reported as such


def test_without_a_cgroup_the_per_process_split_still_bounds_the_total(monkeypatch):
    monkeypatch.setattr(cgroup, "create", lambda *_a: (None, "cgroups switched off for this test"))
    assert cgroup.fallback_split(512 << 20, 24) == (1, 512 << 20)
    assert cgroup.fallback_split(4096 << 20, 64) == (8, 512 << 20)
    result = run_python(FOUR_CHILDREN_OF_400_MB, limits=HALF_GB)
    assert result.isolation["memory"] == "per-process split", result.isolation
    assert held(result) < 4, result.stdout
    assert "fork refused" in result.stderr


def test_oom_kills_in_the_group_are_reported_as_memory():
    report = {"timed_out": False, "exit_code": 0, "signal": None, "cpu_seconds": 1.0, "oom_kills": 2}
    assert classify(report, False, "", 5)[0] == MEMORY
    assert classify({**report, "oom_kills": 0}, False, "", 5)[0] == PASSED


def test_sandboxed_code_cannot_create_user_namespaces():
    needs("userns_denied")
    source = (
        "import ctypes, os, subprocess\n"
        "libc = ctypes.CDLL('libc.so.6', use_errno=True)\n"
        "rc = libc.unshare(0x10000000)\n"  # CLONE_NEWUSER
        "print('unshare', rc, ctypes.get_errno())\n"
        "cmd = subprocess.run(['unshare', '--user', '--map-root-user', 'id', '-u'], capture_output=True, text=True)\n"
        "print('tool', cmd.returncode, cmd.stdout.strip() or '-')\n"
        "print('threads-and-processes-still-work', subprocess.run(['true']).returncode)\n"
    )
    result = run_python(source, limits=FAST)
    assert result.status == PASSED, result.stderr
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    assert lines["unshare"].split()[0] == "-1", result.stdout
    assert not lines["tool"].startswith("0 "), result.stdout
    assert lines["threads-and-processes-still-work"] == "0"


def test_cgroup_v2_layout_is_written_as_the_kernel_expects(tmp_path, monkeypatch):
    """This machine has cgroup v1; the v2 branch is checked on a folder laid out like /sys/fs/cgroup."""
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    parent = tmp_path / "job"
    parent.mkdir()
    (parent / "cgroup.controllers").write_text("cpu memory pids\n")
    (parent / "cgroup.subtree_control").write_text("cpu\n")
    monkeypatch.setattr(cgroup, "ROOT", str(tmp_path))
    monkeypatch.setattr(cgroup, "_own_paths", lambda: {"": "/job"})
    group, why = cgroup.create("run1", 512 << 20, 16)
    assert group is not None and group.kind == "v2", why
    assert (parent / "cgroup.subtree_control").read_text() == "+memory +pids"
    assert (parent / "run1" / "memory.max").read_text() == str(512 << 20)
    assert group.procs_files == [str(parent / "run1" / "cgroup.procs")]
    (parent / "run1" / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert cgroup.oom_kills(group) == 1
    for name in ("memory.max", "memory.events", "cgroup.subtree_control"):
        (parent / "run1" / name).unlink(missing_ok=True)
    cgroup.remove(group)
    assert not (parent / "run1").exists()


def listening_unix_socket(path: str) -> socket.socket:
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    if not path.startswith("\0"):
        os.chmod(path, 0o777)  # as Postgres and D-Bus leave theirs: anyone may connect
    server.listen()
    server.setblocking(False)
    return server


def test_host_unix_sockets_are_out_of_reach(tmp_path):
    needs("mount", "user", "network")
    tag = secrets.token_hex(4)
    open_dir = Path(__file__).resolve().parent / f".sockets-{tag}"  # world-writable, outside /run and /tmp
    open_dir.mkdir()
    open_dir.chmod(0o777)
    paths = [f"/run/optimas-test-{tag}.sock", f"/tmp/optimas-test-{tag}.sock", str(open_dir / "s.sock"),
             f"\0optimas-test-{tag}"]  # the last one abstract
    servers = [listening_unix_socket(p) for p in paths]
    source = (
        "import socket\n"
        f"for p in {paths!r}:\n"
        "    s = socket.socket(socket.AF_UNIX)\n"
        "    try:\n"
        "        s.connect(p)\n"
        "        print('connected', repr(p))\n"
        "    except OSError as exc:\n"
        "        print('refused', repr(p), exc.errno)\n"
    )
    try:
        result = run_python(source, limits=FAST)
        accepted = []
        for path, server in zip(paths, servers, strict=True):
            try:
                server.accept()[0].close()
                accepted.append(path)
            except BlockingIOError:
                pass
    finally:
        for path, server in zip(paths, servers, strict=True):
            server.close()
            if not path.startswith("\0"):
                os.unlink(path)
        open_dir.rmdir()
    assert result.status == PASSED, result.stderr
    assert accepted == [] and "connected" not in result.stdout, result.stdout


def test_many_files_under_the_per_file_cap_cannot_fill_the_disk():
    needs("mount")
    limits = SandboxLimits(wall_seconds=20, memory_mb=768, max_file_mb=8, work_mb=32, scratch_mb=16)
    source = (
        "import os\n"
        "for where in ('.', '/tmp'):\n"
        "    written = 0\n"
        "    for i in range(25):\n"  # 200 MB in files of 8 MB, each within max_file_mb
        "        try:\n"
        "            with open(os.path.join(where, f'f{i}'), 'wb') as fh:\n"
        "                fh.write(b'x' * (8 << 20))\n"
        "            written += 8\n"
        "        except OSError:\n"
        "            break\n"
        "    print(where, written)\n"
    )
    result = run_python(source, limits=limits)
    assert result.status == PASSED, result.stderr
    written = dict(line.split() for line in result.stdout.splitlines())
    assert int(written["."]) <= 32 and int(written["/tmp"]) <= 16, written
