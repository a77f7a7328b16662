"""The unit-test harness: what passes, what fails, what the executor reports, and the outcome cache."""
from __future__ import annotations

import pytest

from optimas_cli.sandbox import SandboxLimits
from optimas_pipelines.bigcodebench import execution
from optimas_pipelines.bigcodebench.execution import OutcomeCache, SuiteOutcome, describe, run_suites
from optimas_pipelines.bigcodebench.metric import pass_rate_metric
from optimas_pipelines.bigcodebench.suite_plan import plan_suite

LIMITS = SandboxLimits(wall_seconds=20, memory_mb=1024, output_bytes=65536)
CODE = "def task_func(a, b):\n    return a + b\n"
TESTS = (
    "import os, unittest\n"
    "class TestCases(unittest.TestCase):\n"
    "    def test_sum(self):\n        self.assertEqual(task_func(2, 3), 5)\n"
    "    def test_empty_cwd(self):\n        self.assertEqual(os.listdir('.'), [])\n"
)


def test_harness_verdicts_for_good_wrong_broken_slow_and_cheating_code():
    pairs = [
        (CODE, TESTS),
        ("def task_func(a, b):\n    return a - b\n", TESTS),
        ("def task_func(a, b:\n", TESTS),
        ("import time\ndef task_func(a, b):\n    time.sleep(60)\n", TESTS),
        ("import os\nos._exit(0)\n", TESTS),  # ends the run before any test could fail
    ]
    limits = SandboxLimits(wall_seconds=6, memory_mb=1024, output_bytes=65536)
    good, wrong, broken, slow, cheat = run_suites(pairs, limits, workers=2)
    assert good.passed and good.tests_run == 2, good
    assert wrong.status == "failed" and wrong.failed == 1 and wrong.failures[0]["test"] == "test_sum"
    assert broken.status == "error" and "SyntaxError" in broken.error
    assert slow.status == "timeout"
    assert cheat.status == "failed" and not cheat.passed


def test_executor_report_quotes_the_failing_assertion():
    outcome = run_suites([("def task_func(a, b):\n    return a - b\n", TESTS)], LIMITS)[0]
    report = describe(outcome)
    assert "1 problem(s) in 2 test(s)" in report
    assert "test_sum" in report and "self.assertEqual(task_func(2, 3), 5)" in report and "AssertionError" in report


def test_reports_for_other_outcomes():
    assert describe(SuiteOutcome("timeout")).startswith("Execution timed out")
    assert describe(SuiteOutcome("passed", tests_run=3)) == "All 3 generated tests passed."
    assert describe(SuiteOutcome("error", error="NameError: x")).endswith("NameError: x")
    assert len(describe(SuiteOutcome("error", error="x" * 5000), max_chars=300)) <= 300


def test_pass_rate_metric_scores_in_batch_and_does_not_rerun_cached_code(monkeypatch):
    metric = pass_rate_metric(LIMITS, workers=2)
    examples = [{"test": TESTS}, {"test": TESTS}, {"test": TESTS}]
    outputs = [{"code": CODE}, {"code": "def task_func(a, b):\n    return 0\n"}, {"code": None}]
    assert metric.many(examples, outputs) == [1.0, 0.0, 0.0]

    def no_more_runs(*_args, **_kw):
        raise AssertionError("a cached outcome was run again")

    monkeypatch.setattr(execution, "run_many", no_more_runs)
    assert metric(examples[0], outputs[0]) == 1.0


def test_cache_keeps_definite_outcomes_only_and_stays_bounded():
    cache = OutcomeCache(max_entries=2)
    cache.put("t", SuiteOutcome("timeout"))
    assert cache.get("t") is None
    for key in "abc":
        cache.put(key, SuiteOutcome("passed"))
    assert cache.get("a") is None and cache.get("c") is not None


@pytest.mark.parametrize("bad", [[{"code": CODE}], []])
def test_metric_many_rejects_mismatched_lengths(bad):
    metric = pass_rate_metric(LIMITS)
    with pytest.raises(ValueError):
        metric.many([{"test": TESTS}, {"test": TESTS}], bad)


def test_suite_plan_lists_tests_as_unittest_would_without_running_them():
    source = (
        "import unittest\nfrom unittest import TestCase as TC\n"
        "class Base(TC):\n    data = [1]\n    def test_b(self):\n        pass\n    def helper(self):\n        pass\n"
        "class TestCases(Base):\n    test_dir = '/tmp'\n    a, b = 1, 2\n"
        "    def test_a(self):\n        pass\n    def setUp(self):\n        pass\n"
        "class NotATest:\n    def test_x(self):\n        pass\n"
    )
    plan = plan_suite(source)
    assert plan.tests == [("Base", "test_b"), ("TestCases", "test_a"), ("TestCases", "test_b")]
    assert set(plan.own_names["TestCases"]) == {"test_dir", "a", "b", "test_a", "setUp"}
    assert plan_suite("class (:\n").tests == []
    assert plan.builtins_used == []
    uses = ("import unittest\nclass T(unittest.TestCase):\n    def test(self):\n        self.assertTrue(abs(len([1])))\n"
            "if __name__ == '__main__':\n    unittest.main()\n")
    assert plan_suite(uses).builtins_used == ["abs", "len"]
    assert plan_suite("def len(x):\n    return 1\n" + uses).builtins_used == ["abs"]  # the tests' own len


def test_system_exit_and_keyboard_interrupt_are_failures_that_name_the_exception():
    raising = "def task_func(a, b):\n    raise {}\n"
    at_teardown = TESTS + "    @classmethod\n    def tearDownClass(cls):\n        task_func(0, 0)\n" + (
        "class MoreTests(unittest.TestCase):\n    def test_more(self):\n        pass\n")
    pairs = [("import sys\nsys.exit(3)\n" + CODE, TESTS), ("raise KeyboardInterrupt\n" + CODE, TESTS),
             (raising.format("KeyboardInterrupt"), TESTS), (raising.format("SystemExit(0)"), TESTS),
             (CODE.replace("    return", "    if a == 0:\n        raise KeyboardInterrupt\n    return"), at_teardown)]
    exit_at_load, interrupt_at_load, interrupt, exit_in_test, between_tests = run_suites(pairs, LIMITS)
    assert exit_at_load.status == "failed" and "SystemExit: 3" in exit_at_load.error, exit_at_load
    assert interrupt_at_load.status == "failed" and "KeyboardInterrupt" in interrupt_at_load.error, interrupt_at_load
    assert interrupt.status == "failed" and interrupt.tests_run == 2 and interrupt.failed == 1, interrupt
    assert "KeyboardInterrupt" in interrupt.failures[0]["trace"]
    assert exit_in_test.status == "failed" and "SystemExit" in exit_in_test.failures[0]["trace"], exit_in_test
    assert between_tests.status == "failed" and between_tests.tests_run == 2 and between_tests.failed == 0, between_tests
    assert "KeyboardInterrupt between tests" in between_tests.error, between_tests


def test_the_source_runs_as_one_module_although_the_harness_looks_between_solution_and_tests():
    """The harness compiles the solution's and the tests' statements apart (to check between them):
    a __future__ import still covers the tests, a leading string of the tests is no docstring, and
    tracebacks keep the lines' numbers in the whole."""
    solution = '"""Solution."""\nfrom __future__ import annotations\ndef task_func(a: int):\n    return a'
    tests = ('"""Tests."""\nimport unittest\nclass TestCases(unittest.TestCase):\n'
             "    def test_one_module(self) -> None:\n"
             "        self.assertEqual(__doc__, 'Solution.')\n"
             "        self.assertEqual(TestCases.test_one_module.__annotations__, {'return': 'None'})\n"
             "    def test_line(self):\n        self.assertEqual(task_func(1), 2)\n")
    outcome = run_suites([(solution, tests)], LIMITS)[0]
    assert outcome.tests_run == 2 and outcome.failed == 1 and outcome.failures[0]["test"] == "test_line", outcome
    assert 'File "__test__.py", line 13, in test_line' in outcome.failures[0]["trace"], outcome.failures
