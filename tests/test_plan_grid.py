"""Every pipeline x every method (conf/pipeline/*.yaml x conf/method/*.yaml): `optimas plan` plans it (exit 0,
every method's own work planned, none "not modelled") or refuses in one line (exit 2); where plan refuses,
`optimas run` refuses the same way before Hydra starts, so no run folder is made. A pipeline whose data is
missing refuses with its own one-line data error, which counts as such a refusal."""
from __future__ import annotations

import contextlib
import io

import pytest

import optimas_cli.app
from optimas_cli.cli import main
from optimas_cli.conf import CONF_DIR
from optimas_cli.methods.cost import PHASES

PIPELINES = sorted(p.stem for p in (CONF_DIR / "pipeline").glob("*.yaml"))
METHODS = sorted(p.stem for p in (CONF_DIR / "method").glob("*.yaml"))
EVALUATION = {"final_validation", "test", "test_initial"}
CHANGES_NOTHING = {"unoptimized", "single_llm"}


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """(pipeline, method) -> (exit code, stdout, stderr) of `optimas plan`, in a folder with no earlier runs."""
    folder = tmp_path_factory.mktemp("grid")
    mp = pytest.MonkeyPatch()
    mp.chdir(folder)
    out = {}
    for pipeline in PIPELINES:
        for method in METHODS:
            stdout, stderr = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                rc = main(["plan", f"pipeline={pipeline}", f"method={method}"])
            out[pipeline, method] = rc, stdout.getvalue(), stderr.getvalue()
    mp.undo()
    return out


def test_plan_plans_or_refuses_every_pair_in_one_line(grid):
    for (pipeline, method), (rc, stdout, stderr) in grid.items():
        if rc == 2:
            lines = stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("optimas: ") and not stdout, (pipeline, method, stderr)
            continue
        assert rc == 0 and not stderr.strip(), (pipeline, method, rc, stderr)
        assert "not modelled" not in stdout, (pipeline, method)
        planned = {line.split()[0] for line in stdout.splitlines()[2:] if line.split() and line.split()[0] in PHASES}
        if method not in CHANGES_NOTHING:  # the method's own work is planned, not only its evaluation
            assert planned - EVALUATION, (pipeline, method, stdout)


def test_the_grid_holds_the_mismatches_a_review_found(grid):
    """`optimas plan pipeline=toy_retriever method=dspy` exited 0 while `optimas run` refused after making a run
    folder: a prompt optimizer on a pipeline without prompts is refused in one line that names the kinds."""
    rc, _, stderr = grid["toy_retriever", "dspy"]
    assert rc == 2 and "optimizes prompt components" in stderr and "retriever: choice" in stderr
    for method in ("sysdpo", "reinforce"):  # weights methods on a pipeline without LoRA components
        assert grid["hotpotqa", method][0] == 2
    assert grid["hotpotqa", "optimas"][0] == 0


def test_run_refuses_what_plan_refuses_before_a_folder_exists(grid, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)

    def started():
        raise AssertionError("the Hydra app started: a run folder would be made")

    monkeypatch.setattr(optimas_cli.app, "main", started)
    refused = [pair for pair, (rc, _, _) in grid.items() if rc == 2]
    assert refused
    for pipeline, method in refused:
        rc = main(["run", f"pipeline={pipeline}", f"method={method}"])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1 and err[0] == grid[pipeline, method][2].strip(), (pipeline, method, err)
        assert not any(tmp_path.iterdir()), (pipeline, method, list(tmp_path.iterdir()))
