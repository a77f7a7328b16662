"""An OpenAI Agents SDK agent (`agents.Agent`) as a component: its `instructions` are the prompt optimas
changes, or, given `models`, its model name is. Needs the extra: pip install 'optimas[openai-agents]'.

    from optimas_cli.adapters.openai_agents import OpenAIAgentComponent
    OpenAIAgentComponent(agent, "answerer", inputs={"question": "Question"}, output="answer",
                         run_config=RunConfig(model_provider=OpenAIProvider(openai_client=..., use_responses=False)))
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from optimas_cli.adapters.agent import AgentComponent, AgentReply, missing_extra
from optimas_cli.errors import UserError

try:
    from agents import Agent, ModelSettings, RunConfig, Runner
except ImportError:
    raise missing_extra("openai-agents", "OpenAI Agents SDK", "openai-agents") from None


class OpenAIAgentComponent(AgentComponent):
    """`run_config` is how the agent reaches its model (its `model_provider`); without one, the SDK's default
    OpenAI client, with tracing off: the SDK exports a trace of every run to OpenAI unless told not to, and an
    optimization makes thousands of runs. Pass a run_config of your own to keep tracing."""

    framework = "OpenAI Agents SDK"

    def __init__(self, agent: Agent, name: str, inputs: dict[str, str], output: str, *,
                 run_config: RunConfig | None = None, models: Sequence[str] = (), description: str | None = None,
                 parse: Callable[[str, dict], Any] | None = None, alternatives: tuple[str, ...] = (),
                 concurrency: int = 8):
        if agent.instructions is not None and not isinstance(agent.instructions, str):
            raise UserError(f"component {name!r}: agent {agent.name!r} computes its instructions (a function), "
                            "so there is no text to optimize", "give the agent its instructions as a string")
        run_config = run_config or RunConfig(tracing_disabled=True)
        if models and run_config.model is not None:
            raise UserError(f"component {name!r}: run_config.model overrides the model optimas would pick",
                            "leave run_config.model unset and give the agent its model")
        self.agent, self.run_config = agent, run_config
        super().__init__(name, description or agent.handoff_description or f"{self.framework} agent {agent.name!r}",
                         inputs, output, instruction=agent.instructions or "",
                         model=agent.model if isinstance(agent.model, str) else None, models=models, parse=parse,
                         alternatives=alternatives, concurrency=concurrency)

    async def run_agent(self, task: str, instruction: str, model: str | None, temperature: float | None) -> AgentReply:
        agent = self.agent.clone(instructions=instruction, **({"model": model} if model is not None else {}))
        run_config = self.run_config
        if temperature is not None:  # over the run_config's own settings, which override the agent's
            settings = (run_config.model_settings or ModelSettings()).resolve(ModelSettings(temperature=temperature))
            run_config = dataclasses.replace(run_config, model_settings=settings)
        result = await Runner.run(agent, task, run_config=run_config)
        usage = result.context_wrapper.usage
        return AgentReply(str(result.final_output), usage.requests, usage.input_tokens, usage.output_tokens)
