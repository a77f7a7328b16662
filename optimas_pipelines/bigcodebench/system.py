"""BigCodeBench as in the paper: write code, write tests, run them, revise.

    question, code_prompt, entry_point -> code_generator -> initial_code
    question, entry_point -> unit_test_generator -> generated_tests
    initial_code, generated_tests -> executor -> execution_report      (sandboxed, no configuration)
    question, initial_code, generated_tests, execution_report -> final_code_generator -> code

The global reward runs the task's real unit tests against `code` in the sandbox (metric.py).
Tasks whose libraries are missing here are skipped and counted in `pipeline.info`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import ClassVar

from optimas_cli.errors import UserError
from optimas_cli.sandbox import SandboxLimits, probe_isolation
from optimas_cli.system import Component, CompoundSystem, ConfigKind, Pipeline, RunContext, SingleLLMTask
from optimas_cli.system.parsing import PARSE_FAILURES
from optimas_pipelines.bigcodebench import prompts
from optimas_pipelines.bigcodebench.data import load_splits
from optimas_pipelines.bigcodebench.execution import OutcomeCache, describe, run_suites
from optimas_pipelines.bigcodebench.extract import defines, extract_code, extract_tests
from optimas_pipelines.bigcodebench.metric import pass_rate_metric


@dataclass(eq=False)
class CodeGenerator(Component):
    """Writes a first solution from the task statement."""

    calls_lm: ClassVar[bool] = True

    max_tokens: int = 768

    def forward(self, inputs: list[dict], value, ctx: RunContext) -> list[dict]:
        texts = ctx.complete(self.name, [prompts.code_messages(value, x["question"]) for x in inputs],
                             max_tokens=self.max_tokens)
        codes = [extract_code(t, x["entry_point"], x["code_prompt"]) for t, x in zip(texts, inputs, strict=True)]
        ctx.count(self.name, PARSE_FAILURES, sum(not defines(c, x["entry_point"]) for c, x in zip(codes, inputs, strict=True)))
        return [{"initial_code": code} for code in codes]


@dataclass(eq=False)
class UnitTestGenerator(Component):
    """Writes unit tests for the task, without seeing any solution."""

    calls_lm: ClassVar[bool] = True

    max_tokens: int = 768

    def forward(self, inputs: list[dict], value, ctx: RunContext) -> list[dict]:
        messages = [prompts.tests_messages(value, x["question"], x["entry_point"]) for x in inputs]
        texts = ctx.complete(self.name, messages, max_tokens=self.max_tokens)
        tests = [extract_tests(t, x["entry_point"]) for t, x in zip(texts, inputs, strict=True)]
        ctx.count(self.name, PARSE_FAILURES, sum(not t for t in tests))
        return [{"generated_tests": t} for t in tests]


@dataclass(eq=False)
class Executor(Component):
    """Runs the initial code against the generated tests in the sandbox and reports what failed."""

    limits: SandboxLimits = field(default_factory=lambda: SandboxLimits(wall_seconds=30, output_bytes=65536))
    workers: int | None = None
    cache: OutcomeCache = field(default_factory=OutcomeCache)

    def forward(self, inputs: list[dict], value, ctx: RunContext) -> list[dict]:
        pairs = [(x["initial_code"] or "", x["generated_tests"] or "") for x in inputs]
        outcomes = run_suites(pairs, self.limits, self.workers, self.cache)
        return [{"execution_report": describe(o)} for o in outcomes]


@dataclass(eq=False)
class FinalCodeGenerator(Component):
    """Revises the code from the execution report; a reply with no usable solution keeps the initial code."""

    calls_lm: ClassVar[bool] = True

    max_tokens: int = 768

    def forward(self, inputs: list[dict], value, ctx: RunContext) -> list[dict]:
        messages = [
            prompts.final_messages(value, x["question"], x["initial_code"], x["generated_tests"], x["execution_report"])
            for x in inputs
        ]
        texts = ctx.complete(self.name, messages, max_tokens=self.max_tokens)
        outputs = []
        for text, x in zip(texts, inputs, strict=True):
            code = extract_code(text, x["entry_point"], x["code_prompt"])
            usable = defines(code, x["entry_point"])
            ctx.count(self.name, PARSE_FAILURES, int(not usable))
            outputs.append({"code": code if usable else x["initial_code"]})
        return outputs


def build_system(code_max_tokens: int, tests_max_tokens: int, executor_limits: SandboxLimits,
                 workers: int | None) -> CompoundSystem:
    components = [
        CodeGenerator(
            name="code_generator",
            description="Generates a Python solution for the coding problem.",
            inputs=("question", "code_prompt", "entry_point"), outputs=("initial_code",),
            kind=ConfigKind.PROMPT, default=prompts.CODE_INSTRUCTION, max_tokens=code_max_tokens,
            alternatives=prompts.ALTERNATIVES["code_generator"],
            format_constraints=prompts.FORMAT_CONSTRAINTS["code_generator"],
        ),
        UnitTestGenerator(
            name="unit_test_generator",
            description="Generates Python unit tests to validate the correctness of a solution.",
            inputs=("question", "entry_point"), outputs=("generated_tests",),
            kind=ConfigKind.PROMPT, default=prompts.TESTS_INSTRUCTION, max_tokens=tests_max_tokens,
            alternatives=prompts.ALTERNATIVES["unit_test_generator"],
            format_constraints=prompts.FORMAT_CONSTRAINTS["unit_test_generator"],
        ),
        Executor(
            name="executor",
            description="Executes the generated code against the generated unit tests and reports failures.",
            inputs=("initial_code", "generated_tests"), outputs=("execution_report",),
            kind=ConfigKind.NONE, limits=executor_limits, workers=workers,
        ),
        FinalCodeGenerator(
            name="final_code_generator",
            description="Refines the code based on the test results.",
            inputs=("question", "code_prompt", "entry_point", "initial_code", "generated_tests", "execution_report"),
            outputs=("code",),
            kind=ConfigKind.PROMPT, default=prompts.FINAL_INSTRUCTION, max_tokens=code_max_tokens,
            alternatives=prompts.ALTERNATIVES["final_code_generator"],
            format_constraints=prompts.FORMAT_CONSTRAINTS["final_code_generator"],
        ),
    ]
    return CompoundSystem(components, inputs=("question", "code_prompt", "entry_point"), outputs=("code",))


def build(
    data_dir: str | os.PathLike | None = None,
    code_max_tokens: int = 768,
    tests_max_tokens: int = 768,
    single_llm_max_tokens: int = 768,
    test_timeout: float = 60.0,
    executor_timeout: float = 30.0,
    memory_mb: int = 4096,
    workers: int | None = None,
) -> Pipeline:
    if min(test_timeout, executor_timeout) <= 0 or memory_mb <= 0 or (workers is not None and workers < 1):
        raise UserError(
            f"pipeline bigcodebench: timeouts, memory_mb and workers must be positive "
            f"(got test_timeout={test_timeout}, executor_timeout={executor_timeout}, memory_mb={memory_mb}, "
            f"workers={workers})",
            "e.g. pipeline.test_timeout=60 pipeline.memory_mb=4096 (workers=null uses every core)",
        )
    splits, skipped = load_splits(data_dir)
    judges: dict[str, int] = {}  # verdicts per judge, filled as the metric scores (judges.py)
    executor_limits = SandboxLimits(wall_seconds=executor_timeout, memory_mb=memory_mb, output_bytes=65536)
    test_limits = SandboxLimits(wall_seconds=test_timeout, memory_mb=memory_mb, output_bytes=65536)
    return Pipeline(
        name="bigcodebench",
        system=build_system(code_max_tokens, tests_max_tokens, executor_limits, workers),
        splits=splits,
        metric=pass_rate_metric(test_limits, workers, judges),
        single_llm=SingleLLMTask(
            prompt=prompts.single_llm_messages,
            parse=lambda text: {"code": extract_code(text)},
            max_tokens=single_llm_max_tokens,
        ),
        info={
            "skipped_missing_libs": skipped,
            "test_timeout": test_timeout,
            "memory_mb": memory_mb,
            "sandbox_isolation": probe_isolation(),  # what protected the host during this run
            "judges": judges,  # how many verdicts the out-of-process and the in-process judge gave
        },
    )
