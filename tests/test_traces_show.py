"""Per-example traces (predictions.jsonl.gz) from a real toy run, and `optimas show` on one run, two
runs, failed examples with blame, and folders that are not runs."""
from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from optimas_cli.cli import main as cli_main
from optimas_cli.lrf.model import LocalRewardModel
from optimas_cli.system import Component, CompoundSystem, RunContext, RunLedger
from optimas_cli.system.results_file import read_results
from optimas_cli.system.traces import PREDICTIONS, TraceSink, read_predictions
from tests.cli_runner import optimas
from tests.test_lrf_tiny_backbone import build_tiny_bert
from tests.test_methods_toys import smoke_budget


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("show")
    proc = optimas("run", "pipeline=toy_retriever", "method=unoptimized", f"hydra.run.dir={root / 'run'}", cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root / "run"


def rewrite(folder: Path, change) -> None:
    path = folder / PREDICTIONS
    lines = read_predictions(path)
    for line in lines:
        change(line)
    TraceSink(path).write(lines)


def show(*args: str, capsys, monkeypatch) -> tuple[int, str, str]:
    monkeypatch.setenv("COLUMNS", "220")
    code = cli_main(["show", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_every_example_and_repeat_is_traced_with_each_components_inputs_and_outputs(run):
    results = read_results(run)
    lines = read_predictions(run / PREDICTIONS)
    test = [r for r in lines if r["split"] == "test"]
    val = [r for r in lines if r["split"] == "final_validation"]
    assert len(test) == results["test"]["n"] * 3 and len(val) == results["validation"]["n"]
    for line in lines:
        assert list(line["components"]) == ["retriever", "generator"]
        retriever = line["components"]["retriever"]
        assert set(retriever["inputs"]) == {"question", "passages"} and "passage_id" in retriever["outputs"]
        assert line["components"]["generator"]["outputs"] == line["output"]
        assert line["key"] == line["input"]["query_id"] and "reward" in line["gold"]
    for repeat in range(3):  # each repeat's mean is the per-repeat score in results.json
        mean = statistics.fmean(r["score"] for r in test if r["repeat"] == repeat)
        assert mean == pytest.approx(results["test"]["scores"][repeat])


def test_show_one_run_prints_the_component_summary_and_examples(run, capsys, monkeypatch):
    code, out, _ = show(run, capsys=capsys, monkeypatch=monkeypatch)
    assert code == 0
    assert "4 examples × 3 repeat(s) · mean f1 0.2625" in out
    assert "│ retriever │  12 │       0 │" in out and "│ generator │  12 │       0 │" in out
    assert "no r_k in these traces" in out and out.count("│ Q") == 4
    code, out, _ = show(run, "--component", "retriever", "--limit", "2", capsys=capsys, monkeypatch=monkeypatch)
    assert code == 0 and out.count("│ Q") == 2 and "passage_id" in out


def test_show_two_runs_lines_up_the_examples_that_changed(run, tmp_path, capsys, monkeypatch):
    other = tmp_path / "other"
    shutil.copytree(run, other)

    def fix_q1(line):  # the generator uses passage B on Q1: 0.2 -> 0.9
        if line["split"] == "test" and line["key"] == "Q1":
            line["components"]["generator"]["outputs"] = line["output"] = {"used_option": "B"}
            line["score"] = 0.9
    rewrite(other, fix_q1)
    code, out, _ = show(run, other, capsys=capsys, monkeypatch=monkeypatch)
    assert code == 0
    assert "4 examples in common" in out and "Δ +0.1750" in out and "1 better, 0 worse, 3 unchanged" in out
    assert "│ generator │              1 │      1 │     0 │          0 │" in out
    assert "│ retriever │              0 │" in out
    assert "│ Q1  │ 0.200 │ 0.900 │ generator" in out
    code, out, _ = show(run, other, "--failed", "--component", "retriever", capsys=capsys, monkeypatch=monkeypatch)
    assert code == 0 and "│ Q1" not in out  # retriever's output did not change on Q1


def test_failed_examples_blame_the_component_lowest_relative_to_its_typical_reward(run, tmp_path, capsys,
                                                                                     monkeypatch):
    scored = tmp_path / "scored"
    shutil.copytree(run, scored)
    # retriever's r_k: typical 1.0, but Q2 gets 0.0 (z = -1.7); generator's r_k is ~flat around 5.
    retriever = {"Q1": 1.0, "Q2": 0.0, "Q3": 1.0, "Q4": 1.0}
    generator = {"Q1": 4.0, "Q2": 5.0, "Q3": 5.0, "Q4": 6.0}

    def add_rewards(line):
        line["components"]["retriever"]["reward"] = retriever[line["key"]]
        line["components"]["generator"]["reward"] = generator[line["key"]]
    rewrite(scored, add_rewards)
    code, out, _ = show(scored, "--failed", capsys=capsys, monkeypatch=monkeypatch)
    assert code == 0 and "examples (failed)" in out
    assert "retriever (r=+0.00, z=-1.7)" in out  # Q2: retriever 1.7 std below its mean
    assert "generator (r=+4.00, z=-1.4)" in out  # Q1: generator lowest relative to its own typical score
    # every example failed (F1 < 1): Q2 and Q4 blame the retriever, Q1 and Q3 the generator
    rows = {name: next(line for line in out.splitlines() if f"│ {name} │" in line) for name in ("retriever", "generator")}
    assert rows["retriever"].rstrip().endswith("│ +0.750 ± 0.433 │      2 │")
    assert rows["generator"].rstrip().endswith("│ +5.000 ± 0.707 │      2 │")


def test_a_folder_that_is_not_a_run_is_one_line(tmp_path, capsys, monkeypatch):
    code, out, err = show(tmp_path, capsys=capsys, monkeypatch=monkeypatch)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "is not a run folder" in err
    old = tmp_path / "old"
    old.mkdir()
    (old / "results.json").write_text("{}")
    code, _, err = show(old, capsys=capsys, monkeypatch=monkeypatch)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "no predictions.jsonl.gz" in err


class Answer(Component):
    def __init__(self):
        super().__init__("answer", "answers the question", ("question",), ("answer",))

    def forward(self, inputs, value, ctx):
        return [{"answer": x["question"][::-1]} for x in inputs]


class Shout(Component):
    def __init__(self):
        super().__init__("shout", "upper-cases the answer", ("answer",), ("loud",))

    def forward(self, inputs, value, ctx):
        return [{"loud": x["answer"].upper()} for x in inputs]


def test_a_trained_reward_model_adds_r_k_to_each_component_it_has_a_head_for(tmp_path):
    model = LocalRewardModel(build_tiny_bert(tmp_path / "bert"), {"answer": "answers the question"}, device="cpu")
    system = CompoundSystem([Answer(), Shout()], inputs=("question",), outputs=("loud",))
    examples = [{"id": "a", "question": "capital of france"}, {"id": "b", "question": "who wrote hamlet"}]
    trajs = system.run(examples, system.default_config(), RunContext(ledger=RunLedger(2)))
    sink = TraceSink(tmp_path / PREDICTIONS, reward_model=model)
    sink.write_trajectories(system, trajs, [1.0, 0.0], "test", 0)
    lines = read_predictions(tmp_path / PREDICTIONS)
    expected = model.score("answer", [{"question": e["question"]} for e in examples],
                           [t.steps["answer"]["outputs"] for t in trajs])
    assert [line["components"]["answer"]["reward"] for line in lines] == pytest.approx(expected)
    assert all("reward" not in line["components"]["shout"] for line in lines)  # no head, no r_k
    assert [line["key"] for line in lines] == ["a", "b"] and lines[1]["output"] == {"loud": "TELMAH ETORW OHW"}
    calls = []
    score = model.score
    model.score = lambda *args: calls.append(args) or score(*args)
    sink.write_trajectories(system, trajs, [1.0, 0.0], "test", 1)  # a greedy repeat: the same steps again
    again = read_predictions(tmp_path / PREDICTIONS)[2:]
    assert calls == [] and [line["components"]["answer"]["reward"] for line in again] == pytest.approx(expected)


@pytest.mark.parametrize("score_traces", [True, False])
def test_lrf_score_traces_off_leaves_the_steps_without_r_k(tmp_path, score_traces):
    from omegaconf import OmegaConf

    from optimas_cli.flows.run import trace_sink
    from optimas_cli.system.run_folder import RunFolder

    model = LocalRewardModel(build_tiny_bert(tmp_path / "bert"), {"answer": "answers the question"}, device="cpu")
    cfg = OmegaConf.create({"lrf": {"score_traces": score_traces}})
    sink = trace_sink(RunFolder(tmp_path / "run"), model, cfg)
    system = CompoundSystem([Answer(), Shout()], inputs=("question",), outputs=("loud",))
    trajs = system.run([{"id": "a", "question": "capital of france"}], system.default_config(),
                       RunContext(ledger=RunLedger(2)))
    sink.write_trajectories(system, trajs, [1.0], "test", 0)
    assert ("reward" in read_predictions(sink.path)[0]["components"]["answer"]) is score_traces


def test_single_llm_traces_its_one_call_per_example(tmp_path):
    from fakes import ScriptedLM

    from optimas_cli.methods.base import MethodOutcome
    from optimas_cli.methods.single_llm import SingleLLM
    from optimas_cli.system import Metric, Pipeline, SingleLLMTask, Splits

    system = CompoundSystem([Answer()], inputs=("question",), outputs=("answer",))
    rows = [{"id": "a", "question": "two plus two", "gold": "4"}, {"id": "b", "question": "one plus one", "gold": "2"}]
    task = SingleLLMTask(prompt=lambda ex: [{"role": "user", "content": ex["question"]}],
                         parse=lambda text: {"answer": text.strip()})
    pipeline = Pipeline("arith", system, Splits(rows, rows, rows),
                        Metric("exact", lambda ex, out: float(out["answer"] == ex["gold"])), single_llm=task)
    sink = TraceSink(tmp_path / PREDICTIONS)
    ctx = RunContext(ledger=RunLedger(1), lm=ScriptedLM(" 4 "), phase="test", traces=sink)
    summary = SingleLLM("single_llm", smoke_budget()).evaluate(pipeline, MethodOutcome(system.default_config()), rows, ctx, 2)
    lines = read_predictions(tmp_path / PREDICTIONS)
    assert summary["mean"] == 0.5 and len(lines) == 4 and {line["repeat"] for line in lines} == {0, 1}
    first = lines[0]
    assert first["components"]["single_llm"]["inputs"]["prompt"] == [{"role": "user", "content": "two plus two"}]
    assert first["output"] == {"answer": "4", "raw": " 4 "} and first["score"] == 1.0
    assert first["gold"] == {"id": "a", "gold": "4"} and lines[1]["score"] == 0.0


def test_optimas_eval_writes_traces_too(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    proc = subprocess.run([sys.executable, "-m", "optimas_cli.cli", "eval", "pipeline=toy_hint", "repeats=1",
                           f"hydra.run.dir={tmp_path / 'eval'}"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = read_predictions(tmp_path / "eval" / PREDICTIONS)
    results = read_results(tmp_path / "eval")
    assert {line["split"] for line in lines} == {"test"} and len(lines) == results["test"]["n"]
    assert statistics.fmean(line["score"] for line in lines) == pytest.approx(results["test"]["mean"])
