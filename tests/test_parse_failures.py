"""Outputs a component could not parse are counted per component and phase, and reach results.json and the report."""
from __future__ import annotations

import json

from optimas_cli.flows.run import parse_failures
from optimas_cli.report.parse_failures import parse_failure_table
from optimas_cli.report.runs import Run
from optimas_cli.system import Pipeline, Splits
from optimas_cli.system.compound import CompoundSystem
from optimas_cli.system.context import RunContext
from optimas_cli.system.ledger import RunLedger
from optimas_cli.system.parsing import PARSE_FAILURES
from optimas_cli.system.pipeline import Metric
from optimas_pipelines.amazon.system import NextItemDecider
from optimas_pipelines.hotpotqa.passage_search import Passage
from optimas_pipelines.hotpotqa.system import components as hotpotqa_components
from optimas_pipelines.pubmedqa.system import ProblemSolver
from tests.fakes import ScriptedLM


class OnePassage:
    def search(self, queries, k):
        return [[Passage("Paris", "Paris is the capital of France.")] for _ in queries]


def _hotpotqa(lm) -> tuple[CompoundSystem, RunContext]:
    system = CompoundSystem(hotpotqa_components(OnePassage(), 1), inputs=("question",), outputs=("answer",))
    return system, RunContext(ledger=RunLedger(len(system)), lm=lm, phase="test")


def test_unreadable_replies_fall_back_and_are_counted_per_component():
    def answer(request):
        text = request.messages[-1]["content"]
        if "Hints:" in text:  # the answer generator: an empty reply for the second question
            return "" if "Rome" in text else "Answer: Paris"
        return "Query: (echoed, nothing else)" if "Question: Where is Rome" in text else "Where is Paris?"

    system, ctx = _hotpotqa(ScriptedLM(answer))
    trajs = system.run([{"question": "Where is Paris?"}, {"question": "Where is Rome?"}], system.default_config(), ctx)
    assert [t.final(("answer",))["answer"] for t in trajs] == ["Paris", ""]
    assert trajs[1].steps["question_rewriter"]["outputs"]["rewritten_query"] == "Where is Rome?"  # the fallback
    assert ctx.ledger.events["test"]["question_rewriter"][PARSE_FAILURES] == 1
    assert ctx.ledger.events["test"]["answer_generator"][PARSE_FAILURES] == 1
    assert "info_extractor" not in ctx.ledger.events["test"]


def test_amazon_and_pubmedqa_count_a_reply_that_names_no_label():
    ctx = RunContext(ledger=RunLedger(3), lm=ScriptedLM("I am not sure what they want."), phase="test")
    decider = NextItemDecider(name="next_item_decider", description="d", inputs=("context", "feedback", "choices"),
                              outputs=("answer",), kind="prompt", default="Pick one.")
    out = decider.forward([{"context": "c", "feedback": "f", "choices": ["Red mug", "Blue pen"]}], "Pick.", ctx)
    assert out == [{"answer": ""}] and ctx.ledger.events["test"]["next_item_decider"][PARSE_FAILURES] == 1
    solver = ProblemSolver(name="problem_solver", description="s", inputs=("question", "summary", "solver_model"),
                           outputs=("answer",), kind="prompt", default="Solve.")
    out = solver.forward([{"question": "q", "summary": "s", "solver_model": "local/smollm2-135m-instruct"}] * 2,
                         "Solve.", ctx)
    assert out == [{"answer": "maybe"}] * 2 and ctx.ledger.events["test"]["problem_solver"][PARSE_FAILURES] == 2


def test_results_carry_rates_for_prompt_components_and_the_report_shows_them(tmp_path):
    system, ctx = _hotpotqa(ScriptedLM(""))
    ctx.ledger.record("answer_generator", 4, "test")
    ctx.ledger.record("retriever", 4, "test")
    ctx.count("answer_generator", PARSE_FAILURES, 3)
    pipeline = Pipeline("hotpotqa", system, Splits([], [], []), Metric("f1", lambda e, o: 0.0))
    rates = parse_failures(pipeline, ctx)
    assert rates["answer_generator"]["test"] == {"count": 3, "executions": 4, "rate": 0.75}
    assert "retriever" not in rates, "a component that parses nothing has no parse-failure rate"
    # a checkpoint keeps the counts (a resumed run goes on counting)
    restored = RunLedger(5)
    restored.restore(json.loads(json.dumps(ctx.ledger.state())))
    assert restored.events["test"]["answer_generator"][PARSE_FAILURES] == 3

    run = Run(tmp_path, {"pipeline": "hotpotqa", "method": "optimas", "parse_failures": rates})
    table = parse_failure_table([run], "src")
    assert table.rows == [["hotpotqa", "Optimas", "answer_generator", "1", "75.00% (3)", "4"]]
    assert parse_failure_table([Run(tmp_path, {"pipeline": "x", "method": "y"})], "src") is None


def test_the_report_counts_parse_failures_per_test_pass_not_once_per_repeat(tmp_path):
    """A greedy run with 3 test repeats executes each of its 99 questions 3 times: Amazon's unoptimized decider
    failed on 57 of them, which results.json counts as 171 of 297 executions."""
    rates = {"next_item_decider": {"test": {"count": 171, "executions": 297, "rate": 0.5758}}}
    run = Run(tmp_path, {"pipeline": "amazon", "method": "unoptimized", "parse_failures": rates,
                         "test": {"mean": 0.07, "scores": [0.07] * 3, "n": 99}})
    table = parse_failure_table([run], "src")
    assert table.rows == [["amazon", "Unoptimized", "next_item_decider", "1", "57.58% (57)", "99"]]
    assert table.csv_rows[0][5:] == [57.0, 99.0, 0.5758, 3]
