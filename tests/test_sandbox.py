"""The sandbox runs ordinary programs and survives hostile ones, each with a clear status."""
from __future__ import annotations

import os
import socket
import sys
import time

import pytest

from optimas_cli.sandbox import (
    ERROR,
    FAILED,
    MEMORY,
    PASSED,
    TIMEOUT,
    SandboxJob,
    SandboxLimits,
    probe_isolation,
    run_many,
    run_python,
)
from optimas_cli.sandbox.cleanup import _processes_of

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox targets Linux")

FAST = SandboxLimits(wall_seconds=4, memory_mb=768, max_processes=24)
AS_ROOT = os.geteuid() == 0


def needs(*layers: str):
    """Skip a test whose hostile program would harm the host without these isolation layers."""
    iso = probe_isolation()
    missing = [layer for layer in layers if not iso.get(layer)]
    if missing:
        pytest.skip(f"sandbox isolation {missing} unavailable here: {iso.get('notes')}")


def run(source: str, limits: SandboxLimits = FAST, **kw):
    return run_python(source, limits=limits, **kw)


def assert_no_leftovers(result) -> None:
    uid = result.isolation.get("uid")
    if uid is not None:
        assert _processes_of(uid) == [], "a sandbox process outlived its run"


def test_correct_program_passes_and_sees_only_its_files():
    result = run("import os\nprint(open('data.txt').read(), sorted(os.listdir('.')))", files={"data.txt": "hello"})
    assert result.status == PASSED, result.stderr
    assert "hello ['data.txt', 'main.py']" in result.stdout
    assert result.duration > 0 and result.returncode == 0


def test_wrong_program_fails_and_syntax_error_is_an_error():
    failed = run("assert 1 + 1 == 3, 'wrong sum'")
    assert failed.status == FAILED and "wrong sum" in failed.stderr
    broken = run("def f(:\n    pass")
    assert broken.status == ERROR and "SyntaxError" in broken.stderr


def test_slow_program_times_out_and_infinite_loop_is_killed():
    start = time.monotonic()
    slow = run("import time\ntime.sleep(60)", SandboxLimits(wall_seconds=1.5))
    loop = run("while True:\n    pass", SandboxLimits(wall_seconds=1.5))
    assert slow.status == TIMEOUT and loop.status == TIMEOUT
    assert time.monotonic() - start < 20
    assert_no_leftovers(loop)


def test_cpu_limit_stops_a_program_that_ignores_sigxcpu():
    source = "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True:\n    pass"
    result = run(source, SandboxLimits(wall_seconds=30, cpu_seconds=1))
    assert result.status == TIMEOUT and "CPU" in result.detail


def test_fork_bomb_is_contained_and_every_process_killed():
    needs("user")  # without a fresh uid, RLIMIT_NPROC would count (and starve) the runner's user
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    result = run(bomb, SandboxLimits(wall_seconds=2, max_processes=16))
    assert result.status == TIMEOUT
    assert_no_leftovers(result)


def test_processes_that_escape_their_group_die_with_the_run():
    needs("pid")  # without a PID namespace a setsid'd process outlives its group
    source = (
        "import os, time\n"
        "for _ in range(3):\n"
        "    if os.fork() == 0:\n"
        "        os.setsid()\n"
        "        time.sleep(600)\n"
        "print('parent done')"
    )
    result = run(source)
    assert result.status == PASSED and "parent done" in result.stdout
    assert_no_leftovers(result)


def test_huge_allocation_hits_the_memory_limit():
    result = run("block = bytearray(4 * 1024 ** 3)")
    assert result.status == MEMORY, (result.status, result.stderr)


def test_writing_outside_its_directory_is_refused(tmp_path):
    needs("user")  # as the runner's own user the program may write where that user may
    target = tmp_path / "owned_by_the_test" / "pwned.txt"
    target.parent.mkdir()
    result = run(f"open({str(target)!r}, 'w').write('x')")
    assert not target.exists()
    assert result.status == FAILED
    assert any(e in result.stderr for e in ("PermissionError", "FileNotFoundError", "Read-only file system"))


@pytest.mark.skipif(not AS_ROOT, reason="needs root to drop to a fresh uid")
def test_root_runs_drop_to_an_unprivileged_user_that_cannot_touch_root_files():
    result = run("import os\nprint(os.getuid())\nopen('/etc/optimas-sandbox-probe', 'w')")
    assert result.isolation["user"] is True
    assert result.stdout.split()[0] == str(result.isolation["uid"]) != "0"
    assert result.status == FAILED
    assert "PermissionError" in result.stderr or "Read-only file system" in result.stderr
    assert not os.path.exists("/etc/optimas-sandbox-probe")


def test_socket_to_a_host_service_fails_when_the_network_is_isolated():
    needs("network")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    source = (
        "import socket\n"
        "own = socket.socket()\nown.bind(('127.0.0.1', 0))\nown.listen()\n"
        "socket.create_connection(('127.0.0.1', own.getsockname()[1])).sendall(b'hi')\n"
        "print('own loopback', own.accept()[0].recv(2))\n"
        f"s = socket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint('host reached')\n"
    )
    try:
        result = run(source)
    finally:
        server.close()
    assert "own loopback b'hi'" in result.stdout  # its private loopback works (servers in tests)
    assert result.status == FAILED and "host reached" not in result.stdout
    assert "ConnectionRefusedError" in result.stderr or "OSError" in result.stderr


def test_killing_its_parent_leaves_the_runner_alive():
    needs("pid")
    result = run("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos.kill(-1, signal.SIGKILL)")
    assert result.status in (PASSED, FAILED)  # refused (EPERM/ESRCH) or a no-op on the namespace's init
    assert run("print('still here')").stdout == "still here\n"


def test_environment_is_scrubbed_and_home_is_the_work_directory(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-for-test")
    result = run("import os\nprint(sorted(os.environ))\nprint(os.environ['HOME'] == os.getcwd())")
    assert "OPENAI_API_KEY" not in result.stdout and "sk-secret" not in result.stdout
    assert result.stdout.strip().endswith("True")


def test_output_is_truncated_to_its_tail():
    result = run("for i in range(20000):\n    print(i)", SandboxLimits(wall_seconds=10, output_bytes=200))
    assert result.status == PASSED
    assert result.stdout.endswith("19999\n") and "earlier bytes dropped" in result.stdout
    assert len(result.stdout) < 300


def test_work_directory_is_removed_afterwards():
    result = run("import os\nprint(os.getcwd())")
    assert result.status == PASSED
    assert not os.path.exists(result.stdout.strip())


def test_many_runs_in_parallel_keep_their_order_and_statuses():
    jobs = [SandboxJob(source=f"import sys\nsys.exit({i % 2})", limits=FAST) for i in range(4)]
    results = run_many(jobs, workers=2)
    assert [r.status for r in results] == [PASSED, FAILED, PASSED, FAILED]


def test_isolation_probe_reports_every_layer():
    iso = probe_isolation()
    assert {"network", "pid", "ipc", "mount", "user", "userns_denied", "memory", "notes"} <= set(iso)
    if AS_ROOT:
        assert iso["user"], iso["notes"]
    if has_cap_sys_admin():  # then a refused layer is a bug, not the platform (other tests would just skip)
        assert iso["network"] and iso["pid"] and iso["ipc"] and iso["mount"], iso["notes"]


def has_cap_sys_admin() -> bool:
    try:
        with open("/proc/self/status") as fh:
            caps = next(line for line in fh if line.startswith("CapEff:"))
    except (OSError, StopIteration):
        return False
    return bool(int(caps.split()[1], 16) & (1 << 21))
