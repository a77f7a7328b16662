"""`optimas device-check` (the one-shot GPU check) runs end to end here too: without CUDA every check runs on
the CPU, so the command cannot rot between the rare sessions that have a GPU to run it on."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from optimas_cli.cli import main


def test_the_device_check_passes_on_the_cpu(tmp_path):
    out = tmp_path / "summary.json"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, "-m", "optimas_cli.cli", "device-check", "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads(out.read_text())
    statuses = {check["name"]: check["status"] for check in summary["checks"]}
    assert statuses["lm.load"] == statuses["lrf.train"] == statuses["grpo.train"] == "PASS", statuses
    assert "policies.reinforce" in statuses and "FAIL" not in statuses.values()


def test_an_unknown_check_group_is_refused_with_the_groups_to_use(capsys):
    assert main(["device-check", "--only", "lm,gpu"]) == 2
    assert "unknown check group(s) gpu; use lm, lrf, grpo, policies" in capsys.readouterr().err
