"""`optimas run lm=vllm` against a real HTTP server on 127.0.0.1 (tests/fault_server.py) as a user runs it:
a wrong served name stops before spending, a server lost mid-run ends in one line with the `resume=`
command and the resumed run counts the calls made before the loss, and SIGTERM ends like Ctrl-C."""
from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

from tests.cli_runner import CLI, cli_env
from tests.fault_server import FaultServer

TOKENS_PER_CALL = 8  # the fault server's usage: 7 prompt + 1 completion tokens
# PubMedQA's smoke run, unoptimized: 2 LM components x (4 validation + 4 test x 3 repeats) questions
CALLS = 2 * (4 + 4 * 3)


def run_args(api_base: str, folder: Path, *extra: str) -> list[str]:
    return ["run", "pipeline=pubmedqa", "method=unoptimized", "budget=smoke", "lm=vllm", f"lm.api_base={api_base}",
            "lm.model=hosted_vllm/served", "lm.max_retries=2", "lm.retry_base_seconds=0.05", f"hydra.run.dir={folder}",
            *extra]


def optimas(args: list[str], cwd: Path, cache: Path) -> subprocess.Popen:
    return subprocess.Popen([*CLI, *args], cwd=cwd, env=cli_env(OPTIMAS_CACHE_DIR=str(cache)), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=240)
    return proc.returncode, out, err


def test_a_wrong_served_model_stops_before_any_call(tmp_path):
    with FaultServer(models=("other-model",)) as server:
        code, out, err = finish(optimas(run_args(server.api_base, tmp_path / "run")[:-1]
                                        + ["lm.model=hosted_vllm/typo", f"hydra.run.dir={tmp_path / 'run'}"],
                                        tmp_path, tmp_path / "cache"))
    assert code == 2 and server.chat_requests == 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "does not serve 'typo' (it serves: other-model)" in lines[0], err
    assert "set lm.model=hosted_vllm/other-model" in lines[0]
    assert not (tmp_path / "run" / "results.json").exists()


def test_a_server_lost_mid_run_is_one_line_with_resume_and_its_calls_are_counted(tmp_path):
    folder, cache = tmp_path / "run", tmp_path / "cache"
    with FaultServer(stop_after=5) as server:
        port = server.port
        code, out, err = finish(optimas(run_args(server.api_base, folder), tmp_path, cache))
    assert code == 2, err
    failure = [line for line in err.strip().splitlines() if "retry" not in line]
    assert len(failure) == 1, err  # one line, after the retries shown on the terminal
    assert "connection refused" in failure[0] and f"resume={folder}" in failure[0]
    assert "retry 1/2" in err and "Traceback" not in err + out
    assert not (folder / "results.json").exists()  # nothing written as a result

    with FaultServer(port=port) as server:  # the server is back
        code, out, err = finish(optimas(run_args(server.api_base, folder, f"resume={folder}"), tmp_path, cache))
    assert code == 0, err
    resumed = json.loads((folder / "results.json").read_text())["ledger"]
    with FaultServer() as server:  # the same run, uninterrupted, with a cache of its own
        code, out, err = finish(optimas(run_args(server.api_base, tmp_path / "whole"), tmp_path, tmp_path / "cache2"))
    assert code == 0, err
    whole = json.loads((tmp_path / "whole" / "results.json").read_text())["ledger"]
    # The calls answered before the loss are paid calls, not free cache hits: counts as if never interrupted.
    for key in ("calls", "tokens"):
        assert resumed[key] == whole[key] > 0
    assert resumed["lm"]["total"]["cache_hits"] == whole["lm"]["total"]["cache_hits"]
    assert resumed["tokens"] == TOKENS_PER_CALL * (resumed["calls"] - whole["lm"]["total"]["cache_hits"])
    assert resumed["lm"]["by_model"] == whole["lm"]["by_model"] == {
        "context_analyst": {"hosted_vllm/served": CALLS // 2}, "problem_solver": {"hosted_vllm/served": CALLS // 2}}


def test_sigterm_ends_like_ctrl_c_with_the_resume_line(tmp_path):
    folder = tmp_path / "run"
    with FaultServer("slow") as server:
        proc = optimas(run_args(server.api_base, folder), tmp_path, tmp_path / "cache")
        deadline = time.monotonic() + 180
        while server.chat_requests == 0 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        code, out, err = finish(proc)
    assert code == 128 + signal.SIGTERM, err
    assert f"terminated (SIGTERM); continue with: optimas run ... resume={folder}" in out
    assert "Traceback" not in err and not (folder / "results.json").exists()
