"""`resume=` from the command line: only a run of the same pipeline and method with compatible settings
is continued; anything else is one clear line, exit 2, and the folder is left exactly as it was."""
from __future__ import annotations

import json

import pytest

from optimas_cli.cli import main
from tests.cli_runner import optimas


def snapshot(folder):
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(folder.rglob("*"))
            if p.is_file()}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished unoptimized run of the toy retriever."""
    cwd = tmp_path_factory.mktemp("resume")
    proc = optimas("run", "pipeline=toy_retriever", "method=unoptimized", f"hydra.run.dir={cwd / 'run'}", cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return cwd / "run"


@pytest.mark.parametrize("args, expected", [
    (["pipeline=toy_retriever", "method=unoptimized", "resume={missing}"], "no such run folder"),
    (["pipeline=toy_hint", "method=unoptimized", "resume={run}"], "is a run of pipeline 'toy_retriever', not 'toy_hint'"),
    (["pipeline=toy_retriever", "method=single_llm", "resume={run}"], "is a run of method 'unoptimized', not 'single_llm'"),
    (["pipeline=toy_retriever", "method=unoptimized", "seed=7", "resume={run}"], "other seed (0 there, 7 now)"),
    (["pipeline=toy_retriever", "method=unoptimized", "resume={notrun}"], "not a run folder"),
    # issue 26 item 12: these were accepted silently, and a refusal inside a group named only the group
    (["pipeline=toy_retriever", "method=unoptimized", "data_dir={tmp}", "resume={run}"], "other data_dir ("),
    (["pipeline=toy_retriever", "method=unoptimized", "lm.api_base=http://other:8000/v1", "resume={run}"],
     "other lm.api_base (None there, 'http://other:8000/v1' now)"),
    (["pipeline=toy_retriever", "method=unoptimized", "lrf.train.epochs=3", "resume={run}"],
     "other lrf.train.epochs (10 there, 3 now) — resume with lrf.train.epochs=10"),
])
def test_an_incompatible_resume_is_one_line_and_leaves_the_folder_untouched(finished, tmp_path, capsys, args,
                                                                            expected):
    (tmp_path / "notrun").mkdir()
    paths = {"run": finished, "missing": tmp_path / "missing", "notrun": tmp_path / "notrun", "tmp": tmp_path}
    before = snapshot(finished)
    assert main(["run", *[a.format(**paths) for a in args]]) == 2  # refused before Hydra starts
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], lines
    assert snapshot(finished) == before
    assert not (tmp_path / "missing").exists()


def test_a_compatible_resume_keeps_the_original_config(finished, tmp_path):
    original = (finished / "config.yaml").read_bytes()
    proc = optimas("run", "pipeline=toy_retriever", "method=unoptimized", "budget.max_runs=500", f"resume={finished}",
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (finished / "config.yaml").read_bytes() == original
    assert "max_runs: 500" in (finished / "config.resumed.yaml").read_text()
    assert json.loads((finished / "results.json").read_text())["ledger"]["caps"] == {"max_runs": 500.0}


@pytest.mark.parametrize("override, expected", [
    ("budget.max_runs=-5", "budget.max_runs must be above 0"),
    ("budget.max_usd=abc", "budget.max_usd must be a number"),
    ("budget.max_wall=0", "budget.max_wall must be above 0"),
    ("compute.price_per_hour=-1", "compute.price_per_hour must be dollars per hour"),
    ("lm.price.input_per_mtok=x", "lm.price.input_per_mtok must be a number"),
])
def test_bad_caps_and_prices_are_one_clear_line(tmp_path, capsys, override, expected):
    assert main(["run", "pipeline=toy_retriever", "method=unoptimized", override,
                 f"hydra.run.dir={tmp_path / 'run'}"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], lines
    assert not (tmp_path / "run").exists()


def test_a_folder_from_before_a_setting_resumes_with_what_it_ran(finished, tmp_path, capsys):
    """A folder written before `paired_noise` and `lrf.collect.labels` existed ran with independent noise and
    Monte Carlo labels: resuming it under today's paired_noise=shared is refused with the fix, and
    lrf.collect.labels=mc (what it ran) is not a difference; nor is its build target's module name from
    before the pipelines became `optimas_pipelines`."""
    import shutil

    from omegaconf import OmegaConf

    old = tmp_path / "old"
    shutil.copytree(finished, old)
    config = OmegaConf.load(old / "config.yaml")
    del config["paired_noise"]
    del config.lrf.collect["labels"]
    config.pipeline["_target_"] = "pipelines.toys.retriever.build"
    OmegaConf.save(config, old / "config.yaml")
    assert main(["run", "pipeline=toy_retriever", "method=unoptimized", f"resume={old}"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "other paired_noise ('independent' there, 'shared' now) — resume with paired_noise=independent" in line
    proc = optimas("run", "pipeline=toy_retriever", "method=unoptimized", "paired_noise=independent",
                   "repeats=2", f"resume={old}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
