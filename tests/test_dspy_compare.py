"""experiment=dspy_compare: the example DSPy program under Optimas, MIPROv2 and GEPA at matched cost, 3 seeds, and
the floors `optimas report` sets beside them (optimas_pipelines/dspy_program/floors.py), read from the runs' own
test examples. No run here: the sweep is composed, the floors are scored without an LM."""
from __future__ import annotations

import itertools
import json
import statistics
from pathlib import Path

import pytest

from optimas_cli.config_schema import check_config
from optimas_cli.errors import UserError
from optimas_cli.report.floors import pipeline_floors
from optimas_cli.report.runs import load_runs
from optimas_cli.system.traces import PREDICTIONS, TraceSink
from optimas_pipelines.dspy_program import build
from optimas_pipelines.dspy_program import floors as dspy_floors
from tests.test_sweeps import experiment_override, sweep_jobs

ROOT = Path(__file__).resolve().parent.parent
RAG = "examples/dspy_program/rag.py:program"


def test_the_comparison_is_three_seeds_of_optimas_then_its_matched_baselines(monkeypatch):
    from hydra import compose, initialize_config_dir

    from optimas_cli.conf import CONF_DIR

    jobs, cfg = sweep_jobs("dspy_compare")  # in the order Hydra's basic sweeper launches them
    methods = ["optimas", "unoptimized", "dspy", "gepa"]
    assert jobs == [{"seed": s, "method": m} for s, m in itertools.product(["0", "1", "2"], methods)]
    # matched cost as table3_matched: Optimas uncapped and first in each seed, the others capped at its spend
    assert cfg.budget.max_runs_from == "optimas" and cfg.budget.max_runs is None and cfg.budget.name == "small"
    assert cfg.lm.model == "local/smollm2-135m-instruct" and cfg.program == RAG
    assert cfg.pipeline._target_ == "optimas_pipelines.dspy_program.build"
    monkeypatch.chdir(ROOT)  # the program is a path from the repository root, where the sweep runs
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        job = compose("config", overrides=[experiment_override("dspy_compare"), "seed=1", "method=gepa"])
    check_config(job)
    assert job.pipeline.program == RAG and job.method.name == "gepa"
    assert build(**{k: v for k, v in job.pipeline.items() if k != "_target_"}).name == "dspy_rag"


def test_a_program_given_as_a_file_path_imports_with_the_modules_beside_it(monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr("sys.path", [p for p in __import__("sys").path if not p.endswith("dspy_program")])
    pipeline = build(program=RAG)  # rag.py imports `corpus` from its own folder, as `python rag.py` would
    assert pipeline.name == "dspy_rag" and len(pipeline.splits.test) == 4
    with pytest.raises(UserError, match=r"pipeline.program file examples/nothing.py does not exist — ") as err:
        build(program="examples/nothing.py:program")
    assert "\n" not in str(err.value)


def test_a_programs_floors_are_its_training_majority_and_its_code_without_an_lm(monkeypatch):
    monkeypatch.chdir(ROOT)
    config = {"pipeline": {"_target_": "optimas_pipelines.dspy_program.build", "program": RAG}, "budget": {}}
    train = dspy_floors.train_examples(config)
    assert len(train) == 8  # the example's whole trainset: no budget.train_size
    test = [{"question": "Which country is Vienna the capital of?", "answer": "Austria", "key": "vienna"},
            {"question": "Who painted the Mona Lisa?", "answer": "Leonardo", "key": "mona"},
            {"question": "Where was Ada Lovelace born?", "answer": "London", "key": "ada"}]
    chance, majority, copy = dspy_floors.floors(train, test, config)
    assert chance.scores is None and "open text" in chance.how
    # London answers 2 of the 8 training questions; scored by the program's metric (gold within the answer)
    assert majority.name == "majority answer='London'" and majority.scores == {"vienna": 0.0, "mona": 0.0, "ada": 1.0}
    # query = the question, the program's BM25 retrieves, answer = the passages: the gold is in them where the
    # corpus has it
    assert copy.scores == {"vienna": 1.0, "mona": 0.0, "ada": 1.0}
    config["budget"]["train_size"] = 5  # no answer recurs among the first five: no majority
    assert dspy_floors.floors(dspy_floors.train_examples(config), test, config)[1].scores is None


def write_run(folder: Path, method: str, scores: dict[str, float], examples: dict[str, dict]) -> None:
    """A finished pipeline=dspy run of the example (results.json, the test traces) as `optimas run` writes them."""
    folder.mkdir(parents=True)
    TraceSink(folder / PREDICTIONS).write(
        {"key": k, "split": "test", "repeat": 0, "index": i, "score": s, "output": {"answer": "?"},
         "input": {"question": examples[k]["question"]}, "gold": {"answer": examples[k]["answer"]}}
        for i, (k, s) in enumerate(scores.items()))
    mean = statistics.fmean(scores.values())
    (folder / "results.json").write_text(json.dumps({
        "pipeline": "dspy_rag", "method": method, "metric": "metric",
        "test": {"mean": mean, "std": 0.0, "scores": [mean], "n": len(scores)}, "ledger": {"runs": 4.0, "tokens": 0, "calls": 4},
        "config": {"seed": 0, "budget": {"train_size": 8}, "method": {"name": method},
                   "pipeline": {"_target_": "optimas_pipelines.dspy_program.build", "program": RAG}}}))


def test_the_report_finds_a_programs_floors_by_its_pipelines_build(tmp_path, monkeypatch):
    """A run is named after its program (dspy_rag): no optimas_pipelines/dspy_rag, the floors are dspy_program's."""
    monkeypatch.chdir(ROOT)
    examples = {f"t{i}": e for i, e in enumerate(build(program=RAG).splits.test)}
    write_run(tmp_path / "0-dspy-unoptimized", "unoptimized", dict.fromkeys(examples, 0.0), examples)
    found = pipeline_floors(load_runs([str(tmp_path)]).runs)
    assert found.declared and not found.reason
    assert {f.name: f.mean for f in found.floors} == {"chance": None, "majority answer='London'": 0.0,
                                                      "copy inputs (no LM)": 1.0}
    assert found.best().name == "copy inputs (no LM)"
