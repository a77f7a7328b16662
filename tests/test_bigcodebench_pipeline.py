"""BigCodeBench end to end on real tasks, with a scripted LM: real sandboxed tests decide the reward."""
from __future__ import annotations

import os

import pytest

from optimas_cli.system import RunContext, RunLedger
from optimas_cli.system.evaluate import evaluate
from optimas_pipelines.bigcodebench import build
from optimas_pipelines.bigcodebench.data import load_tasks
from tests.fakes import ScriptedLM

DATA = "/work/shared/data"
TASK_IDS = ("BigCodeBench/1", "BigCodeBench/2", "BigCodeBench/4")  # stdlib-only tasks with quick tests

pytestmark = pytest.mark.skipif(not os.path.isdir(f"{DATA}/bigcodebench"), reason="shared BigCodeBench file absent")


@pytest.fixture(scope="module")
def pipeline():
    return build(data_dir=DATA, workers=2, test_timeout=60, executor_timeout=60, memory_mb=2048)


@pytest.fixture(scope="module")
def tasks():
    by_id = {t["task_id"]: t for t in load_tasks(DATA)}
    return [by_id[i] for i in TASK_IDS]


def fenced(code: str) -> str:
    return f"Here is the code.\n```python\n{code}```\n"


def scripted(tasks, initial, final):
    """An LM playing all three LM components: `initial`/`final` map a task to the code it writes."""

    def task_of(text: str) -> dict:
        return next(t for t in tasks if t["question"].strip() in text)

    def answer(request) -> str:
        text = request.messages[-1]["content"]
        task = task_of(text)
        if "Current code:" in text:
            return fenced(final(task, text))
        if "Function to test:" in text:
            return fenced(task["test"])  # the scripted tester happens to write the real tests
        return fenced(initial(task))

    return ScriptedLM(answer)


def canonical(task, *_):
    return task["code_prompt"] + task["canonical_solution"]


def wrong(task, *_):
    return task["code_prompt"] + "    return None\n"


def run(pipeline, tasks, lm):
    ctx = RunContext(ledger=RunLedger(len(pipeline.system)), lm=lm)
    trajectories = pipeline.system.run(tasks, pipeline.system.default_config(), ctx)
    scores = pipeline.metric.many([t.example for t in trajectories], [t.final(("code",)) for t in trajectories])
    return trajectories, scores


def test_canonical_solutions_pass_and_the_executor_says_so(pipeline, tasks):
    trajectories, scores = run(pipeline, tasks, scripted(tasks, canonical, lambda task, _: canonical(task)))
    assert scores == [1.0, 1.0, 1.0]
    for t in trajectories:
        assert t.state["execution_report"].startswith("All ") and "generated tests passed" in t.state["execution_report"]


def test_wrong_code_fails_unless_the_final_generator_fixes_it_from_the_report(pipeline, tasks):
    def final(task, prompt):
        # Fixes the first task only, and only because the report shows failing tests.
        if task is tasks[0] and "problem(s)" in prompt:
            return canonical(task)
        return wrong(task)

    trajectories, scores = run(pipeline, tasks, scripted(tasks, wrong, final))
    assert scores == [1.0, 0.0, 0.0]
    for t in trajectories:
        assert "problem(s)" in t.state["execution_report"] and "test_" in t.state["execution_report"]


def test_evaluate_scores_the_pass_rate_and_reports_skipped_tasks(pipeline, tasks):
    lm = scripted(tasks, canonical, lambda task, _: wrong(task) if task is tasks[2] else canonical(task))
    ctx = RunContext(ledger=RunLedger(len(pipeline.system)), lm=lm)
    result = evaluate(pipeline, pipeline.system.default_config(), tasks, ctx)
    assert result["mean"] == pytest.approx(2 / 3) and result["n"] == 3
    skipped = pipeline.info["skipped_missing_libs"]
    assert skipped["total"] == skipped["train"] + skipped["val"] + skipped["test"]
    assert sum(pipeline.splits.sizes().values()) + skipped["total"] == 1140


def test_single_llm_baseline_parses_code_from_one_reply(pipeline, tasks):
    task = tasks[0]
    messages = pipeline.single_llm.prompt(task)
    assert task["question"].strip() in messages[-1]["content"]
    output = pipeline.single_llm.parse(fenced(canonical(task)))
    assert pipeline.metric(task, output) == 1.0
