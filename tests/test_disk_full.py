"""A full disk under the run folder (issue 26 item 3): one line, exit 2, and the folder continues with
resume= once there is space (before: a Hydra traceback at start, or after the work). Real full disks: a
small tmpfs in a user namespace (`unshare -rm`), skipped where user namespaces are not allowed."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_lm_cache_failures import needs_namespaces

ROOT = Path(__file__).resolve().parent.parent
RUN = ["run", "pipeline=toy_hint", "method=unoptimized"]
# Each writer a run uses, on a disk too small for what it writes: what the run says of the error it raises.
WRITERS = """
import sys, torch
from safetensors.torch import save_file
from optimas_cli.lm.cache import CachedCompletion, CallCache
from optimas_cli.system.run_folder import RunFolder, disk_full, disk_full_error
folder, weights = RunFolder(sys.argv[1]), {"w": torch.zeros(1 << 18)}
writers = {"json": lambda: folder.write_json("big.json", ["x" * 1000] * 1000),
           "safetensors": lambda: save_file(weights, str(folder.file("w.safetensors"))),
           "torch": lambda: torch.save(weights, folder.file("w.pt")),
           "sqlite": lambda: [CallCache(folder.file("calls.sqlite")).put(str(i), CachedCompletion("x" * 4000))
                              for i in range(100)]}
for kind, write in writers.items():
    try:
        write()
        print(kind, "wrote it all")
    except Exception as error:
        full = disk_full(error)
        print(kind, disk_full_error(folder.path, full) if full else f"not a full disk: {error!r}")
    for written in folder.path.iterdir():  # an empty disk for the next writer
        written.unlink()
"""
# The CLI with its start-up free-space check lowered, so the disk fills in the middle of the run.
LATE = ("import sys; import optimas_cli.system.run_folder as r; r.MIN_FREE_BYTES = 0; "
        "from optimas_cli.cli import main; sys.exit(main(sys.argv[1:]))")


def in_namespace(script: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPTIMAS_CACHE_DIR": str(tmp_path / "cache")}
    return subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=300,
                          env=env, cwd=tmp_path)


def cli(*args: str, late: bool = False) -> str:
    quoted = " ".join(f"'{a}'" for a in args)
    return f"{sys.executable} -c \"{LATE}\" {quoted}" if late else f"{sys.executable} -m optimas_cli.cli {quoted}"


@needs_namespaces
def test_no_space_at_start_is_one_line(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    proc = in_namespace(f"mount -t tmpfs -o size=8k tmpfs {disk} && {cli(*RUN, f'hydra.run.dir={disk}/run')}", tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "no space left for the run folder" in lines[0], proc.stderr


@needs_namespaces
@pytest.mark.parametrize("size", ["24k", "32k"])  # full before the results, full in the test evaluation's traces
def test_a_disk_that_fills_during_the_run_is_one_line_and_the_folder_resumes(tmp_path, size):
    disk = tmp_path / "disk"
    disk.mkdir()
    run = disk / "run"
    proc = in_namespace(
        f"mount -t tmpfs -o size={size} tmpfs {disk} && {{ {cli(*RUN, f'hydra.run.dir={run}', late=True)}; "
        f"echo rc=$?; }}; mount -o remount,size=4m {disk} && {cli(*RUN, f'resume={run}')}; echo rc=$?", tmp_path)
    said = [line for line in proc.stderr.splitlines() if line.strip()]
    assert "Traceback" not in proc.stderr and len(said) == 1, proc.stderr
    assert "no space left on the device of the run folder" in said[0] and f"resume={run}" in said[0]
    assert proc.stdout.count("rc=") == 2 and "rc=2" in proc.stdout and proc.stdout.strip().endswith("rc=0")
    assert "test f1 = 0.4200" in proc.stdout  # the resumed run, as an uninterrupted one scores


@needs_namespaces
def test_every_writer_on_a_full_disk_is_the_one_full_disk_line(tmp_path):
    """What json, safetensors (the LRF), torch.save (SysDPO's optimizer state) and sqlite (the LM call cache) raise
    on a real full disk: before, safetensors' SafetensorError and torch's RuntimeError were 25-30-line tracebacks."""
    disk = tmp_path / "disk"
    disk.mkdir()
    proc = in_namespace(f"mount -t tmpfs -o size=64k tmpfs {disk} && {sys.executable} -c '{WRITERS}' {disk}", tmp_path)
    said = dict(line.split(" ", 1) for line in proc.stdout.strip().splitlines())
    assert proc.returncode == 0 and said.keys() == {"json", "safetensors", "torch", "sqlite"}, proc.stderr
    for kind, line in said.items():
        assert line.startswith(f"no space left on the device of the run folder {disk}: its disk is full (No space "
                               "left on device") and line.endswith("run the same command again"), (kind, line)
