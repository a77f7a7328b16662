"""Baseline: one LM call on the raw task, no pipeline (the paper's "Single LLM" row)."""
from __future__ import annotations

from optimas_cli.errors import UserError
from optimas_cli.methods.base import Method, MethodOutcome
from optimas_cli.system.evaluate import summarize


class SingleLLM(Method):
    def fit(self, pipeline) -> list[str]:
        """It changes nothing, but needs the pipeline's raw task as one LM call."""
        if pipeline.single_llm is None:
            raise UserError(f"method single_llm needs the pipeline's task as one LM call, and pipeline "
                            f"{pipeline.name!r} defines no single-LLM task", "choose another method")
        return []

    def optimize(self, pipeline, splits, ctx, folder) -> MethodOutcome:
        self.fit(pipeline)
        return MethodOutcome(config=pipeline.system.default_config())

    def evaluation(self, pipeline, n, into) -> None:
        """One call per example, counted as one system run (as `evaluate` records it)."""
        into.executions["single_llm"] += n * len(pipeline.system)
        into.calls["single_llm"] += n

    def evaluate(self, pipeline, outcome, examples, ctx, repeats):
        task = pipeline.single_llm
        per_repeat = []
        for r in range(repeats):
            rctx = ctx.replace(sample_index=ctx.sample_index + r)
            prompts = [task.prompt(ex) for ex in examples]
            texts = rctx.complete("single_llm", prompts, max_tokens=task.max_tokens)
            answers = [task.parse(text) for text in texts]
            scores = pipeline.metric.many(examples, answers)
            if ctx.traces is not None:
                ctx.traces.write_outputs(examples, pipeline.system.inputs, "single_llm", prompts,
                                         [{**a, "raw": t} for a, t in zip(answers, texts, strict=True)],
                                         scores, ctx.phase, r)
            ctx.ledger.record("single_llm", len(examples) * len(pipeline.system), ctx.phase)  # one call ~ one run
            per_repeat.append(scores)
        return summarize(per_repeat, len(examples))
