"""`resume=` of a run that already finished with the same settings: one line saying so and where its results
are, exit 2 before Hydra starts, and the folder left exactly as it was (issue 47)."""
from __future__ import annotations

import json

import pytest

from optimas_cli.cli import main
from tests.cli_runner import optimas

RUN = ["pipeline=toy_retriever", "method=unoptimized"]


def snapshot(folder):
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(folder.rglob("*"))
            if p.is_file()}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("finished")
    proc = optimas("run", *RUN, f"hydra.run.dir={cwd / 'run'}", cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return cwd / "run"


def test_resuming_a_finished_run_says_so_and_changes_nothing(finished, capsys):
    before = snapshot(finished)
    assert main(["run", *RUN, f"resume={finished}"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "already finished" in lines[0] and f"{finished}/results.json" in lines[0]
    assert snapshot(finished) == before


def test_a_run_stopped_by_a_cap_is_not_finished(finished, tmp_path, capsys):
    """A results.json that a cap stopped is where a resume with a raised cap goes on: not refused here."""
    stopped = tmp_path / "run"
    stopped.mkdir()
    for name in ("config.yaml", "results.json"):
        (stopped / name).write_bytes((finished / name).read_bytes())
    results = json.loads((stopped / "results.json").read_text())
    (stopped / "results.json").write_text(json.dumps({**results, "stopped": "max_runs"}))
    from optimas_cli.overrides import check_overrides

    check_overrides([*RUN, f"resume={stopped}"])  # no UserError
