"""How a launcher report becomes a status, and which folders the private view must cover."""
from __future__ import annotations

import signal

import pytest

from optimas_cli.sandbox.mounts import first_hidden_ancestor
from optimas_cli.sandbox.results import EXIT_ERROR, EXIT_MEMORY, EXIT_SETUP, SandboxLimits
from optimas_cli.sandbox.runner import _Tail, classify, sandbox_env


def report(**kw):
    return {"timed_out": False, "exit_code": None, "signal": None, "cpu_seconds": 0.1, **kw}


def test_exit_codes_and_signals_map_to_statuses():
    assert classify(report(exit_code=0), False, "", 5)[0] == "passed"
    assert classify(report(exit_code=1), False, "", 5)[0] == "failed"
    assert classify(report(exit_code=EXIT_ERROR), False, "", 5)[0] == "error"
    assert classify(report(exit_code=EXIT_SETUP), False, "", 5)[0] == "error"
    assert classify(report(exit_code=EXIT_MEMORY), False, "", 5)[0] == "memory"
    assert classify(report(timed_out=True), False, "", 5)[0] == "timeout"
    assert classify(report(signal=signal.SIGXCPU), False, "", 5)[0] == "timeout"
    assert classify(report(signal=signal.SIGKILL, cpu_seconds=6.0), False, "", 5)[0] == "timeout"
    assert classify(report(signal=signal.SIGKILL), False, "", 5) == ("killed", "ended by SIGKILL")
    assert classify(report(signal=signal.SIGABRT), False, "std::bad_alloc", 5)[0] == "memory"
    assert classify(report(signal=signal.SIGSEGV), False, "", 5)[0] == "killed"
    assert classify(None, True, "", 5)[0] == "timeout"
    assert classify(None, False, "", 5)[0] == "error"


def test_tail_keeps_the_last_bytes_and_says_how_many_were_dropped():
    tail = _Tail(4)
    for chunk in (b"abc", b"defg", b"h"):
        tail.add(chunk)
    assert tail.text() == "[... 4 earlier bytes dropped ...]\nefgh"


def test_environment_is_an_allow_list_plus_the_job_extras():
    env = sandbox_env("/w", {"EXTRA": "1"})
    assert env["HOME"] == env["TMPDIR"] == "/w" and env["EXTRA"] == "1"
    assert not any("KEY" in k or "TOKEN" in k for k in env)


def test_first_hidden_ancestor_finds_a_folder_others_cannot_enter(tmp_path):
    hidden = tmp_path / "private"
    (hidden / "inner").mkdir(parents=True)
    tmp_path.chmod(0o755)
    above = first_hidden_ancestor(str(tmp_path))  # pytest's own base folder may be 0700 already
    hidden.chmod(0o700)
    assert first_hidden_ancestor(str(hidden / "inner")) == (above or str(hidden))
    hidden.chmod(0o755)
    assert first_hidden_ancestor(str(hidden / "inner")) == above


def test_limits_reject_nonsense():
    with pytest.raises(ValueError):
        SandboxLimits(wall_seconds=0)
    assert SandboxLimits(wall_seconds=3).cpu_limit == 3
